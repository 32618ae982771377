import django_filters

from backend.jobs.models import Job, JobStatus, JobType


class JobFilter(django_filters.FilterSet):
    vc = django_filters.CharFilter(field_name="vc__name")
    owner = django_filters.CharFilter(field_name="owner__username")
    status = django_filters.MultipleChoiceFilter(choices=JobStatus.choices)
    type = django_filters.MultipleChoiceFilter(choices=JobType.choices)
    array = django_filters.CharFilter(field_name="array__array_id", help_text="An array's id.")
    array_index = django_filters.NumberFilter(
        field_name="array_index", help_text="A task's index in its array (with array)."
    )

    class Meta:
        model = Job
        fields = ["vc", "owner", "status", "type", "array", "array_index"]
