"""What apps above the VCs' app add to its answers, registered in their AppConfig.ready()
(backend/core/extensions.py): the jobs app adds a VC's resources to its detail."""

from __future__ import annotations

from backend.core.extensions import AnswerFields
from backend.vcs.models import VirtualCluster

# A VC's detail (its create, retrieve and settings answers) beyond its settings.
vc_detail_fields: AnswerFields[VirtualCluster] = AnswerFields("A VC's detail")
