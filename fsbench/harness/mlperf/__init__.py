"""MLPerf: the LoadGen driver, submission packaging and its rules, the accuracy log, TEST04 and the system
description."""
