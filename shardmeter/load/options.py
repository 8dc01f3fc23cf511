"""Strategy options inside ``[parallelism]`` and ``[sync]``: keys that are not fields of the
table's record belong to the registered strategies (their ``options``); they are split
out, checked by the chosen strategy's options class (its types and validators), and a key
read only by a strategy that is not chosen is kept and noted as ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardmeter.errors import ScenarioError
from shardmeter.load.specs import MAX_COUNT
from shardmeter.registry.convert import key_path

__all__ = ["split_options", "check_option_values", "check_option_record"]


def check_option_values(
    defaults: Mapping[str, Any], given: Mapping[str, Any], where: str, file: str | None
) -> None:
    """The one rule the loader adds to a chosen strategy's options: an integer past
    :data:`~shardmeter.load.specs.MAX_COUNT` is an overflow, not a plan. Every other value rule
    is the options class's own (its field types, through the strict converter, and its
    validators: :func:`check_option_record`), so a plugin's option may take any value its class
    accepts (a negative float, ...); a declarative record's options class carries the rules of
    its defaults' kinds (:func:`shardmeter.parts.make_options_class`)."""
    for k, v in given.items():
        if k in defaults and isinstance(v, int) and not isinstance(v, bool) and v > MAX_COUNT:
            raise ScenarioError(
                f"{v!r} is absurdly large (limit {MAX_COUNT})", path=f"{where}.{k}", file=file
            )


def check_option_record(options: type, given: Mapping[str, Any], where: str, file: str | None) -> None:
    """The chosen strategy's options class built from the keys it declares, so that its own
    validators (DiLoCo's ``compression_bits`` from 1 to 32, ...) reject a value when the
    scenario is loaded, not only when it is estimated; one line naming ``where.KEY``."""
    from shardmeter.parts import option_defaults
    from shardmeter.registry.convert import structure_record

    names = option_defaults(options)
    structure_record({k: v for k, v in given.items() if k in names}, options, path=where, file=file)


def split_options(
    table: dict[str, Any],
    fields: set[str],
    known: Mapping[str, set[str]],
    chosen: str | tuple[str, ...],
    where: str,
    file: str | None,
    notes: list[str],
) -> tuple[dict, dict]:
    """Separate a table's fixed keys from strategy options; unknown keys are errors.

    ``chosen`` names the strategies the table selects; a key read only by other
    registered strategies is kept and noted as ignored."""
    chosen = (chosen,) if isinstance(chosen, str) else tuple(chosen)
    base, opts = {}, {}
    all_known = set().union(*known.values()) if known else set()
    for k, v in table.items():
        if k in fields:
            base[k] = v
        elif k in all_known:
            opts[k] = v
            owners = [n for n, o in known.items() if k in o]
            if not set(chosen) & set(owners):
                which = "' / '".join(chosen)
                notes.append(
                    f"{where}.{k} is read by {', '.join(owners)}, not by the chosen '{which}': ignored"
                )
        else:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(fields | all_known), n=2, cutoff=0.6)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ScenarioError(f"unknown key{hint}", path=f"{where}.{key_path(k)}", file=file)
    return base, opts
