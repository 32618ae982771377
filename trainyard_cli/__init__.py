"""The ``trainyard`` command-line client: the public REST API from a terminal or a script
(see :mod:`trainyard_cli.main`). It imports nothing of the server."""
