"""Page-number pagination that answers ``{"count", "next", "previous", "results"}``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.views import APIView


class RowsPaginator(Paginator):
    """Counts the queryset as given, then reads one page as ``values(*lookups)`` rows.

    The count stays free of the joins the rows need, and the page builds no model instances.
    A first page that is not full is its own count, so it costs no COUNT query.
    """

    def __init__(self, object_list: QuerySet, per_page: int, *, lookups: Sequence[str]) -> None:
        super().__init__(object_list, per_page)
        self.queryset = object_list
        self.lookups = lookups

    def page(self, number: int | str) -> Page:
        if str(number) == "1":
            rows = list(self.queryset.values(*self.lookups)[: self.per_page + 1])
            if len(rows) <= self.per_page:
                self.__dict__["count"] = len(rows)  # the cached_property, known without a query
            return Page(rows[: self.per_page], 1, self)
        page = super().page(number)
        assert isinstance(page.object_list, QuerySet)  # a slice of ``queryset``
        page.object_list = page.object_list.values(*self.lookups)
        return page


class StandardPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def paginate_rows(
        self,
        queryset: QuerySet,
        lookups: Sequence[str],
        request: Request,
        view: APIView | None = None,
    ) -> list[dict]:
        """As ``paginate_queryset``, with the page read as rows of ``lookups``."""
        # DRF only calls the class, and the partial makes a paginator as the class would.
        self.django_paginator_class = partial(RowsPaginator, lookups=lookups)  # type: ignore[assignment]
        page = self.paginate_queryset(queryset, request, view)
        assert page is not None  # page_size is set, so every list is paginated
        return page
