"""The repair manager's pure part: rules as data, PromQL queries, the planner with its
safety valve, the repair cycle, and the node agent. No Django: ``backend/repairs`` is
the shell that reads the database, calls ``planning`` and applies its decisions."""
