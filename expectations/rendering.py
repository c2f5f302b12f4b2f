"""How the named expectations read in Data Docs: their own name, their rule, their columns.

GE 1.x renders an expectation in Data Docs through the ``LegacyRendererType.PRESCRIPTIVE``
renderer registered under its type (the snake case of its class name); a subclass that
defines none inherits its parent's, which reads only the configuration's kwargs. Our
expectations fix their arguments as class defaults, which GE leaves out of the kwargs
(``exclude_defaults``), so the parent's sentence came out as "Values in None must always be
greater than those in None". ``NamedExpectation`` (a base of every class in
``definitions``) fixes both:

- ``configuration`` puts the fixed arguments (columns, value set, bounds) back into the
  kwargs, so results name their columns and Data Docs group them by column;
- ``_prescriptive_renderer`` renders ``<name>: <rule>. Reads <columns>.`` (and the bound,
  ``max_value = ...``, of the checks that have one).

The offending rows of a failure are rendered by GE's own unexpected-values table, with the
row id columns (topic, partition, offsets) the checkpoint asks for.

The "Observed Value" column says what was counted (``observed_value``): GE's own reads
"0% unexpected", "100% null" for a passed null check (every row without a problem) and "--"
where no row had a value to check (no partition pending deletion). Ours counts the rows in
the class's ``rows`` (remote segments, partitions, replicas) that break the rule and those
not checked, and why: "none of 7 remote segments breaks the rule", "1 of 3 replicas breaks
the rule", "nothing to check: 2 partitions not pending deletion".
"""

from __future__ import annotations

from typing import Any, ClassVar

from great_expectations.render.components import (
    LegacyDiagnosticRendererType,
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
    # what one row of the checked table is (singular, plural)
    rows: ClassVar[tuple[str, str]] = ("row", "rows")
    # why a row with no value in the checked column is not checked (default: the columns)
    unchecked: ClassVar[str] = ""

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

    @classmethod
    def observed_text(cls, result: Any, configuration: Any = None) -> str:
        """What a validation result counted, in words (see the module's docstring)."""
        counts = getattr(result, "result", None) or {}
        checked_all, broken = counts.get("element_count"), counts.get("unexpected_count")
        if not isinstance(checked_all, int) or not isinstance(broken, int):
            info = getattr(result, "exception_info", None) or {}
            raised = isinstance(info, dict) and info.get("raised_exception")
            return "not counted: the check raised an error" if raised else "not counted"
        missing = counts.get("missing_count") or 0
        checked = checked_all - missing
        columns = cls.columns(configuration or getattr(result, "expectation_config", None))
        reason = cls.unchecked or "without " + " or ".join(columns or ["a value"])
        if checked == 0:
            return f"nothing to check: {missing} {cls._noun(missing)} {reason}"
        if broken == 0:
            text = f"none of {checked} {cls._noun(checked)} breaks the rule"
        else:
            verb = "breaks" if broken == 1 else "break"
            text = f"{broken} of {checked} {cls._noun(checked)} {verb} the rule"
        return text + (f"; {missing} not checked ({reason})" if missing else "")

    @classmethod
    def _noun(cls, count: int) -> str:
        return cls.rows[0] if count == 1 else cls.rows[1]

    @classmethod
    @renderer(renderer_type=LegacyDiagnosticRendererType.OBSERVED_VALUE)
    def _diagnostic_observed_value_renderer(
        cls,
        configuration: Any = None,
        result: Any = None,
        runtime_configuration: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> str:
        return cls.observed_text(result, configuration)
