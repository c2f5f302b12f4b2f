"""How the named expectations read in Data Docs: their own name, their rule, their columns.

GE 1.x renders an expectation in Data Docs through the ``LegacyRendererType.PRESCRIPTIVE``
renderer registered under its type (the snake case of its class name); a subclass that
defines none inherits its parent's, which reads only the configuration's kwargs. Our
expectations fix their arguments as class defaults, which GE leaves out of the kwargs
(``exclude_defaults``), so the parent's sentence came out as "Values in None must always be
greater than those in None". ``NamedExpectation`` (first base of every class in
``definitions``) fixes both:

- ``configuration`` puts the fixed arguments (columns, value set, bounds) back into the
  kwargs, so results name their columns and Data Docs group them by column;
- ``_prescriptive_renderer`` renders ``<name>: <rule>. Reads <columns>.`` (and the bound,
  ``max_value = ...``, of the checks that have one).

The offending rows of a failure are rendered by GE's own unexpected-values table, with the
row id columns (topic, partition, offsets) the checkpoint asks for.
"""

from __future__ import annotations

from typing import Any, ClassVar

from great_expectations.render.components import (
    LegacyRendererType,
    RenderedStringTemplateContent,
)
from great_expectations.render.renderer.renderer import renderer

# The fields a check reads or bounds with, in the order they are shown.
COLUMN_FIELDS = ("column", "column_A", "column_B")
FIXED_FIELDS = (*COLUMN_FIELDS, "value_set", "min_value", "max_value", "or_equal", "ignore_row_if")


class NamedExpectation:
    """Mixin for a GE expectation subclass whose ``rule`` is its one-line meaning."""

    rule: ClassVar[str]

    @property
    def configuration(self) -> Any:
        configuration = super().configuration  # type: ignore[misc]
        for name in FIXED_FIELDS:
            if name in type(self).__fields__ and name not in configuration.kwargs:  # type: ignore[attr-defined]
                configuration.kwargs[name] = getattr(self, name)
        return configuration

    @classmethod
    def columns(cls, configuration: Any = None) -> list[str]:
        kwargs = dict(getattr(configuration, "kwargs", None) or {})
        fields = cls.__fields__  # type: ignore[attr-defined]
        found = []
        for name in COLUMN_FIELDS:
            value = kwargs.get(name)
            if value is None and name in fields:
                value = fields[name].default
            if isinstance(value, str):
                found.append(value)
        return found

    @classmethod
    @renderer(renderer_type=LegacyRendererType.PRESCRIPTIVE)
    def _prescriptive_renderer(
        cls,
        configuration: Any = None,
        result: Any = None,
        runtime_configuration: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[RenderedStringTemplateContent]:
        name = getattr(configuration, "type", None) or cls.expectation_type  # type: ignore[attr-defined]
        columns = cls.columns(configuration)
        params: dict[str, Any] = {"name": name, "rule": cls.rule}
        template = "$name: $rule."
        if columns:
            template += " Reads " + ", ".join(f"$column_{i}" for i in range(len(columns))) + "."
            params.update({f"column_{i}": column for i, column in enumerate(columns)})
        kwargs = dict(getattr(configuration, "kwargs", None) or {})
        if kwargs.get("max_value") is not None:
            template += " max_value = $max_value."
            params["max_value"] = kwargs["max_value"]
        styling = {
            "params": {
                "name": {"tag": "strong", "classes": ["expectation-name"]},
                "rule": {"classes": ["expectation-rule"]},
                "max_value": {"tag": "code"},
                **{f"column_{i}": {"tag": "code"} for i in range(len(columns))},
            }
        }
        return [
            RenderedStringTemplateContent(
                content_block_type="string_template",
                string_template={"template": template, "params": params, "styling": styling},
            )
        ]
