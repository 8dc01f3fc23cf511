"""What a strategy part is: the behaviour a plugin contributes, and the records it exchanges with the core.

A part *computes* its own terms, array-at-a-time over the rows of a batch of plans; the core
prices communication on the topology and composes the step (``docs/architecture.md``):

* a :class:`ShardingPart` returns the model-state bytes one GPU holds (:class:`StateBytes`) and
  the collectives it issues (:class:`CommEvent`), from :class:`ShardInputs`, and the layouts it
  cannot run (:meth:`ShardingPart.infeasible`);
* a :class:`SchedulePart` returns the pipeline bubble, the micro-batches in flight and the
  point-to-point transfers (:class:`PipeTerms`) from :class:`PipeInputs`, and declares what it
  needs of a plan (:class:`ScheduleNeeds`: virtual stages, micro-batches);
* a :class:`SyncPart` returns the cross-island time and bytes (:class:`SyncTerms`) from
  :class:`WanInputs`, and declares what a convergence model reads of it
  (:class:`SyncHyperparameters`);
* a :class:`ConvergencePart` returns the tokens a sync strategy needs to reach the loss
  data-parallel training reaches (:class:`ConvergenceTerms`) from its hyperparameters
  (:class:`ConvergenceInputs`); it prices quality, never time (``docs/convergence.md``);
* a :class:`FrameworkPart` (a software-stack profile, ``training.framework``) returns, at load,
  the ``training.*`` and ``parallelism.*`` defaults its stack uses (``docs/frameworks.md``); it
  computes no term itself: what it carries beyond keys is a part it names (a schedule).

The records live in :mod:`shardmeter.exchange` and are importable from here. Every array in
them broadcasts against the others of the same call (in the scalar path, one plan on one
island, they are Python floats). The evaluator calls each distinct
(part, options) pair once per batch (never once per plan) on the batch's arrays, and each row
takes the result of its own part (:mod:`shardmeter.model.dispatch`); a part must therefore
compute elementwise, without looking at other rows.

A part's ``options`` is an attrs class; the scenario's keys for it (``[parallelism]`` for
sharding and schedules, ``[sync]`` for sync) are structured into an instance by the project's
converter, so a misspelt or mistyped option is a one-line error naming the key, and its own
validators are the only value rules. The instance is passed to every method as ``opts``.

A part *declares* what the host needs to know of it; the host never learns it by calling the
part on made-up inputs or from the names of its options: the values ``plan`` tries
(:meth:`Part.search_values`), a schedule's use of virtual stages and its requirements
(:meth:`SchedulePart.needs`) and what it runs as with one stage
(:meth:`SchedulePart.one_stage_order`), a sync strategy's hyperparameters
(:meth:`SyncPart.hyperparameters`), a sharding strategy's infeasible layouts
(:meth:`ShardingPart.infeasible`).
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from shardmeter.exchange import (
    COLLECTIVES,
    CommEvent,
    ConvergenceInputs,
    ConvergenceTerms,
    FailureInputs,
    FailureTerms,
    PipeInputs,
    PipeTerms,
    ScheduleNeeds,
    ShardInputs,
    StateBytes,
    SyncHyperparameters,
    SyncTerms,
    WanInputs,
)
from shardmeter.numeric.ops import Array, floor, maximum, mod, where

if TYPE_CHECKING:  # named in a signature only
    from shardmeter.records import HardwareProfile

__all__ = [
    "NoOptions",
    "Part",
    "ShardingPart",
    "SchedulePart",
    "SyncPart",
    "ShardInputs",
    "ScheduleNeeds",
    "unmet_needs",
    "SyncHyperparameters",
    "VIRTUAL_STAGES",
    "StateBytes",
    "CommEvent",
    "PipeInputs",
    "PipeTerms",
    "WanInputs",
    "SyncTerms",
    "ConvergencePart",
    "ConvergenceInputs",
    "ConvergenceTerms",
    "FailurePart",
    "FailureInputs",
    "FailureTerms",
    "VariabilityPart",
    "FrameworkPart",
    "StackVersion",
    "call_framework",
    "COLLECTIVES",
    "option_defaults",
    "make_options_class",
]


#: Virtual stages ``plan`` tries for a schedule that uses them (Megatron-LM's usual choices),
#: at most the model's layers: :meth:`SchedulePart.search_values`' default.
VIRTUAL_STAGES = (2, 3, 4, 6, 8)


@attrs.frozen
class NoOptions:
    """The options of a part that reads no scenario key."""


def option_defaults(options: type) -> dict[str, Any]:
    """``{name: default}`` of an options class (every field needs a default)."""
    out = {}
    for f in attrs.fields(options):
        d = f.default
        out[f.name] = d.factory() if isinstance(d, attrs.Factory) else d  # type: ignore[arg-type]
    return out


def _sugar_rule(default: Any) -> Any:
    """The value rule of a declarative record's option, which has only its default to go by: an
    integer >= 1 when the default is >= 1, else >= the smaller of 0 and the default
    (``overlap_steps = -1`` is "automatic"); a number >= 0; None for a bool or a string (the
    strict converter checks every type)."""
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return None
    whole = isinstance(default, int)
    floor = (1 if default >= 1 else min(0, default)) if whole else 0.0
    want = f"an integer >= {floor}" if whole else "a finite number >= 0"

    def check(inst: Any, attribute: Any, value: Any) -> None:
        if value < floor:
            raise ValueError(f"{attribute.name}: expected {want}, got {value!r}")

    return check


def make_options_class(name: str, defaults: dict[str, Any]) -> type:
    """An attrs options class from a declarative ``{key: default}`` table (the records' sugar),
    each field typed as its default and checked by :func:`_sugar_rule` (a part's own options
    class states its rules with its validators instead)."""
    fields = {k: attrs.field(default=v, type=type(v), validator=_sugar_rule(v)) for k, v in defaults.items()}
    cls_name = "".join(w.capitalize() for w in str(name).replace("-", "_").split("_") if w) + "Options"
    return attrs.make_class(cls_name or "Options", fields, frozen=True, kw_only=True)


@attrs.frozen(kw_only=True)
class Part:
    """Common fields of a behaviour part: ``name`` (unique per kind), ``options`` (an attrs
    class of the keys it reads, with defaults), ``description`` and ``source`` (citation)."""

    kind: ClassVar[str] = ""
    name: str
    options: type = NoOptions
    description: str = ""
    source: str = ""

    def option_defaults(self) -> dict[str, Any]:
        return option_defaults(self.options)

    def search_values(self, opts: Any) -> Mapping[str, Sequence[Any]]:
        """The values ``plan`` tries, per option: ``{key: values}`` over keys of :attr:`options`
        (a schedule's may also give ``virtual_stages``). The planner crosses them, in this order,
        each candidate setting those keys and leaving the rest at ``opts`` (the scenario's values,
        else the defaults). ``{}`` (the default): the part is tried once, as ``opts`` has it."""
        return {}


# ---------------------------------------------------------------------------------------------
# sharding


@attrs.frozen(kw_only=True)
class ShardingPart(Part):
    """How model state is partitioned over the data-parallel group (ZeRO, FSDP, ...)."""

    kind: ClassVar[str] = "sharding"

    def state(self, inp: ShardInputs, opts: Any) -> StateBytes:
        """Model-state bytes on one GPU."""
        raise NotImplementedError

    def traffic(self, inp: ShardInputs, opts: Any) -> Sequence[CommEvent]:
        """The collectives of one step."""
        raise NotImplementedError

    def infeasible(self, inp: ShardInputs, opts: Any) -> Array:
        """Rows whose layout this strategy cannot run (a shard group that does not divide the
        data-parallel ranks, ...), reported under :attr:`~shardmeter.model.feasibility.Reason.SHARDING`.
        Structural: it may read the degrees ``tp``, ``dp``, ``cp`` and the tiers (``domain_gpus``,
        ``tier_*``) only; ``estimate`` and the planner's pre-check both call it with the size
        fields (parameters, bytes, layers) zero, so a plan is rejected for the same reason before
        and after the full model. The default: nothing is infeasible."""
        return where(inp.dp < 0, True, False)  # shaped like dp

    def infeasible_message(self, opts: Any) -> str | None:
        """Why rows of :meth:`infeasible` cannot run, for the report under
        ``parallelism.sharding`` (a ``str.format`` template that may use ``{tp}``, ``{cp}``,
        ``{dpcp}`` (dp x cp), ``{pp}`` and ``{gpus}``, the island's); ``None``: the bundled
        strategies' message (a shard group must divide dp x cp into whole replicas)."""
        return None


# ---------------------------------------------------------------------------------------------
# pipeline schedules


def unmet_needs(needs: ScheduleNeeds, pipe: PipeInputs) -> Array:
    """Rows of ``pipe`` that break ``needs`` (see :class:`ScheduleNeeds`), shaped like ``pp`` at
    least; only the needs declared are evaluated."""
    pp, m, v = pipe.pp, pipe.micro_batches, pipe.virtual_stages
    bad = where(pp < 0, True, False)
    if needs.min_micro_batches > 1:
        bad = bad | ((pp > 1) & (m < needs.min_micro_batches))
    if needs.virtual_stages == "refused":
        bad = bad | ((pp > 1) & (v > 1))
    if needs.interleaved_multiple_of_pp:
        bad = bad | ((v > 1) & ((pp < 2) | (mod(m, pp) != 0)))
    if needs.interleaved_rounds:
        rounds = maximum(floor(m / maximum(pp, 1.0)), 1.0)
        bad = bad | ((v > 1) & ((pp < 2) | (mod(m, rounds) != 0)))
    return bad


@attrs.frozen(kw_only=True)
class SchedulePart(Part):
    """A pipeline-parallel schedule. ``searched``: whether ``plan`` tries it on a scenario that
    names another schedule (false for one software stack's own engine, which a plan does not
    switch to: ``deepspeed-1f1b``)."""

    kind: ClassVar[str] = "schedule"
    searched: bool = True

    def terms(self, pipe: PipeInputs, opts: Any) -> PipeTerms:
        raise NotImplementedError

    def needs(self, opts: Any) -> ScheduleNeeds:
        """What this schedule needs of a plan (:class:`ScheduleNeeds`). The default: one model
        chunk per GPU, any number of micro-batches."""
        return ScheduleNeeds()

    def uses_virtual_stages(self, opts: Any) -> bool:
        """Whether the bubble shrinks with virtual stages (:meth:`needs`)."""
        return self.needs(opts).virtual_stages == "used"

    def search_values(self, opts: Any) -> Mapping[str, Sequence[Any]]:
        """:meth:`Part.search_values`; the default tries ``virtual_stages`` at
        :data:`VIRTUAL_STAGES` when the schedule uses them (an override adding its own options
        keeps that entry: ``{**super().search_values(opts), "key": [...]}``)."""
        return {"virtual_stages": VIRTUAL_STAGES} if self.uses_virtual_stages(opts) else {}

    def one_stage_order(self, opts: Any) -> Hashable | None:
        """What the schedule runs as with one stage (``pp = 1``: no pipeline, no bubble, no
        transfers, one model chunk): ``"1f1b"`` (each micro-batch's backward right after its
        forward, one in flight: 1F1B, interleaved, DeepSpeed's engine) or ``"gpipe"`` (every
        forward first, all ``m`` in flight). Two (schedule, options) pairs with the same order
        compute the same terms there, so ``plan`` scores the first and counts the others as
        duplicates; ``None`` (the default): its own (only its own virtual-stage variants, which
        the model runs as one chunk at ``pp = 1``, are copies of each other)."""
        return None

    def infeasible(self, pipe: PipeInputs, opts: Any) -> Array:
        """Rows this schedule cannot run (structural: needs ``pp``, ``micro_batches`` and
        ``virtual_stages`` only, so the planner can reject them before the full model). The
        default: the rows that break :meth:`needs` (:func:`unmet_needs`)."""
        return unmet_needs(self.needs(opts), pipe)

    def infeasible_message(self, opts: Any) -> str | None:
        """Why rows of :meth:`infeasible` cannot run, for the report (a ``str.format`` template
        that may use ``{m}``, ``{pp}``, ``{pv}`` (pp x virtual_stages) and ``{v}``); ``None``: the
        interleaved rule's message (the micro-batches must be a multiple of ``pp``). The default
        says which of :meth:`needs` a row can break."""
        n = self.needs(opts)
        said = []
        if n.min_micro_batches > 1:
            said.append(f"at least {n.min_micro_batches} micro-batches per step (got {{m}})")
        if n.virtual_stages == "refused":
            said.append("one model chunk per GPU (pp x virtual_stages is {pv}, pp {pp})")
        if not said and n.interleaved_rounds:
            return (
                f"the schedule '{self.name}' needs, with virtual stages, the micro-batches ({{m}}) "
                "to be a multiple of its rounds, max(1, micro-batches // pp ({pp}))"
            )
        if not said:
            return None
        if n.interleaved_multiple_of_pp:
            said.append("with virtual stages, micro-batches ({m}) a multiple of pp ({pp})")
        if n.interleaved_rounds:
            said.append("with virtual stages, micro-batches ({m}) a multiple of max(1, m // pp ({pp}))")
        return f"the schedule '{self.name}' needs " + " and ".join(said)

    def in_flight_at(self, pipe: PipeInputs, opts: Any, rank: Array) -> Array:
        """Micro-batches whose activations pipeline rank ``rank`` (0 = first stage) holds at its
        peak, in units of one micro-batch through all of that rank's layers. The default is
        :meth:`terms`' ``in_flight`` (the first stage's count) on every rank but the last, and
        one micro-batch on the last (each one's backward follows its forward there); a schedule
        that knows its warm-up per rank says so here."""
        held = self.terms(pipe, opts).in_flight
        return where((rank >= pipe.pp - 1) & (pipe.pp > 1), 1.0, held)

    def loss_in_flight(self, pipe: PipeInputs, opts: Any) -> Array:
        """Micro-batches whose loss (the fp32 logits the cross-entropy saves for its backward)
        the last stage holds at its peak: 1 where each micro-batch's backward follows its
        forward on the last stage (1F1B, interleaved), the default."""
        return where(pipe.pp < 0, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# island synchronisation


@attrs.frozen(kw_only=True)
class SyncPart(Part):
    """How islands synchronise (only with two islands or more)."""

    kind: ClassVar[str] = "sync"

    def state_bytes_per_param(self, opts: Any) -> float:
        """Extra optimizer state per parameter this strategy keeps (sharded like the weights)."""
        return 0.0

    def hyperparameters(self, opts: Any) -> SyncHyperparameters:
        """What a convergence model reads of this strategy with options ``opts``; the default:
        synchronous every step (:class:`SyncHyperparameters`' defaults)."""
        return SyncHyperparameters()

    def exchange(self, wan: WanInputs, opts: Any) -> SyncTerms:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# convergence


@attrs.frozen(kw_only=True)
class ConvergencePart(Part):
    """How a sync strategy's hyperparameters change the tokens needed to reach a given loss."""

    kind: ClassVar[str] = "convergence"

    def terms(self, inp: ConvergenceInputs, opts: Any) -> ConvergenceTerms:
        """The tokens factor and validity of every row (elementwise)."""
        raise NotImplementedError

    def validity(self) -> dict[str, Any]:
        """The ranges the model's sources cover, for the report (``{}``: not stated)."""
        return {}


# ---------------------------------------------------------------------------------------------
# failures and variability


@attrs.frozen(kw_only=True)
class FailurePart(Part):
    """How often a job is interrupted and how long it takes to come back (``[reliability]
    model``); its options are the ``[reliability]`` keys it reads (``gpu_mtbf_h``,
    ``restart_s`` for the bundled fleet models). The host adds each offer's preemptions and
    prices checkpoints and lost work (:mod:`shardmeter.model.reliability`)."""

    kind: ClassVar[str] = "failures"

    def terms(self, inp: FailureInputs, opts: Any) -> FailureTerms:
        """The interruption rates and restart time of every row (elementwise)."""
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class VariabilityPart(Part):
    """How much one rank's time for a phase of the step varies (``[variability] model``); its
    options are the ``[variability]`` keys it reads. A synchronous phase ends when its slowest
    rank does, so the host asks for the phase's quantile over ``ranks`` ranks."""

    kind: ClassVar[str] = "variability"

    def quantile_factor(self, q: float, ranks: Array, kind: str, opts: Any) -> Array:
        """The ``q``-quantile of the slowest of ``ranks`` ranks' times for a phase, over the mean
        time of one rank (the deterministic model's figure); ``kind`` is ``"gpu"`` (compute,
        memory-bound kernels, bubbles) or ``"link"`` (a transfer on a tier or the WAN). Must be
        1 with no variability, and non-decreasing in ``q``."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# software-stack profiles


#: A profile's defaults: ``{"training.KEY" | "parallelism.KEY": (value, why)}``.
FrameworkDefaults = dict[str, tuple[Any, str]]

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _iso_date(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    try:
        ok = bool(_ISO_DATE.fullmatch(value)) and datetime.date.fromisoformat(value).isoformat() == value
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{attribute.name}: expected a date YYYY-MM-DD, got {value!r}")


def _commit(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not (isinstance(value, str) and _COMMIT.fullmatch(value)):
        raise ValueError(f"{attribute.name}: expected a git commit (7 to 40 hex digits), got {value!r}")


def _one_line(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value):
        raise ValueError(f"{attribute.name}: expected one line of text, got {value!r}")


@attrs.frozen(kw_only=True)
class StackVersion:
    """One dated state of a software stack (``training.framework_version``): the stack as it is
    from ``since`` (``YYYY-MM-DD``, the committer date of ``commit`` on the stack's main branch)
    until the next state of the profile's :attr:`FrameworkPart.versions`. ``change`` is one line
    saying what changed, quoting the commit; ``release`` names a tagged release whose state this
    is (a release entry changes nothing itself); ``repo`` is the repository ``commit`` lives in
    when it is not the profile's own (``owner/name``)."""

    since: str = attrs.field(validator=_iso_date)
    commit: str = attrs.field(validator=_commit)
    change: str = attrs.field(validator=_one_line)
    release: str | None = attrs.field(default=None, validator=_one_line)
    repo: str | None = attrs.field(default=None, validator=_one_line)

    @property
    def short(self) -> str:
        """The commit's first 8 hex digits."""
        return self.commit[:8]

    def at_least(self, other: StackVersion) -> bool:
        """Whether this state is ``other``'s or a later one (its date is not before ``other``'s):
        the test a profile's defaults make, ``version.at_least(CHANGE)``."""
        return self.since >= other.since


@attrs.frozen(kw_only=True)
class FrameworkPart(Part):
    """A software-stack profile (``training.framework``): the defaults a stack applies when its
    user writes nothing (its attention kernel per GPU generation, sequence parallelism with TP,
    optimizer sharding, overlaps, recompute, fp8 recipe) and, through those keys, the parts that
    carry its behaviour (a schedule that sends activations as its pipeline engine does).

    A profile never carries a speed multiplier: only settings, each with its source.

    Stacks change their defaults over time. A profile with a :attr:`versions` table is called
    with ``version=`` (the :class:`StackVersion` ``training.framework_version`` picks: the
    newest state at or before a date, a named release's, the newest when unset) in
    :meth:`defaults` and in each behaviour hook; a profile without one has a single undated state
    and is called without it, as before tables existed (:func:`call_framework`).
    """

    kind: ClassVar[str] = "framework"

    #: The stack's dated states, oldest first (``since`` never decreasing, release names
    #: unique): each one a change of what the stack does by default, or a tagged release.
    #: Empty: one undated state (``framework_version`` does not apply).
    versions: ClassVar[tuple[StackVersion, ...]] = ()

    def __attrs_post_init__(self) -> None:
        """A table out of date order, or naming a release twice, is refused at registration."""
        table = tuple(self.versions)
        if any(not isinstance(s, StackVersion) for s in table):
            raise ValueError(f"framework '{self.name}': versions must be StackVersion records")
        if any(b.since < a.since for a, b in itertools.pairwise(table)):
            raise ValueError(f"framework '{self.name}': versions must be oldest first (by since)")
        releases = [s.release for s in table if s.release]
        if len(set(releases)) != len(releases):
            raise ValueError(f"framework '{self.name}': a release is named twice in versions")

    #: Behaviour no key states: with ``training.compile = true`` the stack's loss runs under
    #: torch.compile too, so the cross-entropy's fp32 upcast is fused and the backward keeps
    #: the bf16 logits (2 bytes an element, not 4; :func:`~shardmeter.model.memory.logits_bytes_per_element`).
    #: A profile whose stack changed this over time overrides :meth:`loss_compiled` instead.
    compiled_loss: ClassVar[bool] = False

    def loss_compiled(self) -> bool:
        """Whether, with ``training.compile = true``, the stack compiles its loss too; the
        default: :attr:`compiled_loss`. A profile with :attr:`versions` adds ``version``."""
        return self.compiled_loss

    #: Behaviour no key states: the stack's cross-entropy writes the logits' gradient in place of
    #: what its forward saved (Megatron's vocab-parallel cross-entropy: ``grad_input = softmax``
    #: then in-place updates; a fused or chunked loss), so the loss's backward adds no transient
    #: copy of the logits (:func:`~shardmeter.model.memory.loss_transient_bytes`). A profile whose
    #: stack changed this overrides :meth:`loss_fused` instead.
    fused_loss: ClassVar[bool] = False

    #: Behaviour no key states: with ``tp`` > 1 the stack runs its cross-entropy on vocab-sharded
    #: logits under PyTorch's DTensor ``loss_parallel()``, whose backward is unfused (more
    #: transient copies of the logits; :func:`~shardmeter.model.memory.loss_transient_bytes`).
    #: A profile whose stack changed this overrides :meth:`loss_parallel_enabled` instead.
    loss_parallel: ClassVar[bool] = False

    def loss_parallel_enabled(self) -> bool:
        """Whether, with ``tp`` > 1, the stack's loss runs under DTensor's ``loss_parallel()``;
        the default: :attr:`loss_parallel`. A profile with :attr:`versions` adds ``version``."""
        return self.loss_parallel

    #: Behaviour no key states unless ``training.fp8_backend`` is written: whose fp8 linears
    #: the stack runs, ``"transformer-engine"`` or ``"torchao"`` (None: by the recipe).
    fp8_backend_default: ClassVar[str | None] = None

    def loss_fused(self) -> bool:
        """Whether the stack's loss backward writes the logits' gradient in place (no transient
        copies); the default: :attr:`fused_loss`. A profile with :attr:`versions` adds
        ``version``."""
        return self.fused_loss

    #: Behaviour no key states: the stack's launcher runs PyTorch's caching allocator with
    #: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (one growing segment per stream
    #: instead of one ``cudaMalloc`` per large block; :mod:`~shardmeter.model.allocator`).
    #: PyTorch's default is off. A profile whose stack changed this overrides
    #: :meth:`expandable_segments` instead.
    expandable_segments_default: ClassVar[bool] = False

    def expandable_segments(self) -> bool:
        """Whether the stack's launcher turns on the allocator's expandable segments; the
        default: :attr:`expandable_segments_default`. A profile with :attr:`versions` adds
        ``version``."""
        return self.expandable_segments_default

    #: Behaviour ``training.grad_accumulation_fusion`` states where written: the stack sums
    #: the weight gradients of successive micro-batches inside the weight-gradient GEMM
    #: (Megatron's ``gradient_accumulation_fusion``), so the sum costs no pass of its own
    #: (:mod:`~shardmeter.model.grad_accumulation`). True by default: only ``megatron-lm``
    #: (by date) and ``torchtitan`` (FSDP2) price the separate add. A profile whose stack changed this
    #: overrides :meth:`grad_accumulation_fused` instead.
    grad_accumulation_fused_default: ClassVar[bool] = True

    def grad_accumulation_fused(self, precision: str) -> bool:
        """Whether, at ``training.precision = precision``, the stack sums the micro-batches'
        weight gradients inside the weight-gradient GEMM; the default:
        :attr:`grad_accumulation_fused_default`. A profile with :attr:`versions` adds
        ``version``."""
        return self.grad_accumulation_fused_default

    def op_saves_attention(self, attention: str, gpu: HardwareProfile) -> bool:
        """Behaviour no key states: whether the stack's per-operator selective checkpointing
        (``training.recompute = "op"``) saves the attention kernel's outputs on ``gpu`` with
        ``training.attention = attention``. True (the kernel is on its save list); a stack whose
        save list leaves the kernel out returns False, and the model recomputes attention in
        the backward instead of keeping its output and log-sum-exp
        (:func:`~shardmeter.model.activations.activation_bytes_per_layer`). A profile with
        :attr:`versions` adds ``version: StackVersion | None = None`` and decides by it."""
        return True

    def defaults(self, tables: Mapping[str, Any], gpus: Sequence[HardwareProfile]) -> FrameworkDefaults:
        """The defaults this stack sets, ``{dotted key: (value, why)}`` with keys ``training.*``
        or ``parallelism.*``; ``why`` names the stack's own code or documentation.

        :param tables: the scenario's raw tables as written (after ``--set``), ``[model]`` with its
            preset or ``hf_config`` filled in; read them to decide (a key the user wrote is never
            overridden: the loader fills only keys the scenario leaves out).
        :param gpus: the hardware profiles of the scenario's islands (and offers), to decide per
            GPU generation; one the registry does not know yet (a catalog overlay's) is left out.

        A profile with :attr:`versions` adds a parameter ``version: StackVersion | None = None``,
        the state the scenario picked (:func:`call_framework` gives it only to such a profile;
        None, for a direct call, means the newest).
        """
        raise NotImplementedError


def call_framework(part: FrameworkPart, hook: str, *args: Any, version: StackVersion | None) -> Any:
    """``part.<hook>(*args)``, with ``version=`` where the profile has a :attr:`~FrameworkPart.versions`
    table and implements the hook itself (a profile without a table keeps the signature it was
    written with; :class:`FrameworkPart`'s own hooks take no version)."""
    fn = getattr(part, hook)
    own = getattr(type(part), hook, None) is not getattr(FrameworkPart, hook, None)
    return fn(*args, version=version) if part.versions and own else fn(*args)
