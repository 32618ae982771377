"""The SSH gateway into running jobs (``python -m backend.gateway``, started by ``make run``).

``access`` decides who may reach which job's worker (keys, allowed IPs, the job's state);
``server`` speaks SSH (asyncssh); ``processes`` starts sessions confined in the worker;
``ports`` tells which ports a job listens on; ``targets`` finds workers on the backend.
"""
