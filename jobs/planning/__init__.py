"""Pure planners of the jobs: plain data in, plans out, no I/O (tested without Spark)."""
