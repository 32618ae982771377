"""What apps above the clusters' app add to it, registered in their AppConfig.ready()
(backend/core/extensions.py): the jobs app adds a node's free GPUs to its answer, the job
manager's app removes a node (draining the jobs that run there first)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User

from backend.clusters.models import Node
from backend.core.extensions import AnswerFields, Hook

# A node's answer beyond its own fields.
node_fields: AnswerFields[Node] = AnswerFields("A node's answer")

# Removes the node now if no job runs there (True), else cordons it to drain (False).
NodeRemoval = Callable[[Node, User | None], bool]
node_removal: Hook[NodeRemoval] = Hook("removing a node")
