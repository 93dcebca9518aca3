"""The numerical reference: MX element formats, the Hadamard rotation, Schraudolph proxies and the emulator
that defines what every fast kernel must compute."""
