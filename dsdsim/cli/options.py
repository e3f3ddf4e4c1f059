"""Every command-line option that more than one command takes, declared once.

Each alias is ``Annotated[type, Option(...)]``: a command writes ``model: Model = DEFAULT_MODEL`` and gets
the same long name, short flag and help text as every other command. Defaults come from dsdsim.defaults.
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

from dsdsim.cli.command import Option
from dsdsim.defaults import (DEFAULT_BATCH_SIZES, DEFAULT_DP_ATTENTION, DEFAULT_DRAFT_TREE, DEFAULT_DRAFTER,
                             DEFAULT_ENGINE, DEFAULT_HARDWARE, DEFAULT_KV_DTYPE, DEFAULT_MEMORY_UTILIZATION,
                             DEFAULT_MODEL, DEFAULT_TOLERANCE, DEFAULT_MAX_RANGES)
from dsdsim.errors import DsdsimError
from dsdsim.export.prediction import PredictFormat
from dsdsim.records import frozen

MODEL_HELP = "Target model: a name from `dsdsim list models`, or a config.json path"
HARDWARE_HELP = "Accelerator: a name from `dsdsim list hardware`, or a hardware spec YAML/JSON path"
# The registry's forms (dsdsim.specs.drafters.forms(); tests/test_cli_params.py holds the two equal), written out so
# that `--help` does not load the spec models
DRAFTER_HELP = ("eagle3[:DRAFT_VOCAB] | eagle | mtp | medusa | ngram | draft-model:MODEL | self-spec:KV_BUDGET | "
                "dflash[:LAYERS[,TAPS[,BLOCK]]] | dspark[:LAYERS[,TAPS[,BLOCK[,RANK]]]] | pard:MODEL | "
                "suffix[:US_PER_STEP[,US_PER_SEQUENCE]] (or none)")
ACCEPTANCE_HELP = ("Acceptance: a constant (0.8), conditional per-position alphas (0.8,0.7,0.6), a mean acceptance "
                   "length measured at K (al=2.79@3), beta:MEAN:CONCENTRATION for spread across requests, or a file "
                   "(vLLM Prometheus metrics text, or per-request metrics JSON). Default: the per-position rates in "
                   "vLLM's DSD test data (an example, not your drafter).")
SPECS_DIR_HELP = "Extra folder of your own specs (YAML hardware files, config.json models); also DSDSIM_SPECS_DIRS."


class ShowFormat(str, Enum):
    table = "table"
    json = "json"


class TableFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


# --- what is simulated --------------------------------------------------------------------------------

Model = Annotated[str, Option("--model", "-m", help=MODEL_HELP)]
Hardware = Annotated[str, Option("--hardware", "-g", help=HARDWARE_HELP)]
OptionalHardware = Annotated[Optional[str], Option("--hardware", "-g", help=HARDWARE_HELP)]
Tp = Annotated[int, Option("--tp", help="Tensor-parallel GPUs (weights and heads split tp ways)")]
Pp = Annotated[int, Option("--pp", help="Pipeline stages, each on tp GPUs (tp x pp GPUs; consecutive layers "
                                        "per stage, split as vLLM splits them); plain decoding only")]
Ep = Annotated[int, Option("--ep", help="Expert-parallel groups inside the tp GPUs (must divide tp)")]
WeightDType = Annotated[Optional[str], Option("--dtype", help="Weight format (default: the checkpoint's)")]
KvDType = Annotated[str, Option("--kv-dtype", help="KV-cache format")]
ExpertOverlap = Annotated[Optional[float], Option(
    "--expert-overlap", help="MoE: share of a token's experts the next token of the same sequence keeps beyond "
                             "chance (default 0.354: the locality behind the 38% reuse Cohere measured on a "
                             "128-expert top-8 model; 0 = independent routing)")]
Eager = Annotated[bool, Option("--eager", help="No CUDA graphs: eager per-kernel launch cost")]
MemoryUtilization = Annotated[float, Option(
    "--memory-utilization", "--gpu-memory-utilization",
    help="Usable share of GPU memory (vLLM's --gpu-memory-utilization; TensorRT-LLM's free_gpu_memory_fraction)")]
Drafter = Annotated[str, Option("--drafter", "-d", help=DRAFTER_HELP)]
OptionalDrafter = Annotated[Optional[str], Option("--drafter", "-d", help=DRAFTER_HELP)]
Acceptance = Annotated[Optional[str], Option("--acceptance", "-a", help=ACCEPTANCE_HELP)]
Context = Annotated[int, Option("--context", "-c", help="Tokens already in each sequence's KV cache")]
BatchSizes = Annotated[Optional[str], Option(
    "--batch-sizes", "-b",
    help=f"Batch sizes: a list (1,2,4,8) or a range (1-1024, 1-256:8); default {DEFAULT_BATCH_SIZES}")]
BatchSize = Annotated[int, Option("--batch-size", "--batch", "-b", help="Sequences in the step (batch size B)")]
K = Annotated[int, Option("--k", "-k", help="Draft tokens K per sequence (0 = plain decoding)")]
MaxK = Annotated[Optional[int], Option(
    "--max-k", help="Largest K considered (default: 8, or the drafter's limit when lower, e.g. medusa's heads)")]
ENGINE_HELP = ("Serving engine whose costs are added to the kernels: a name from `dsdsim list engines` (vllm, sglang, "
               "trtllm, ideal = kernels only) or an engine spec YAML path (e.g. from `dsdsim calibrate --measurements`)")
Engine = Annotated[str, Option("--engine", "-e", help=ENGINE_HELP)]
ModelRunner = Annotated[Optional[str], Option(
    "--model-runner", metavar="v1|v2",
    help="vLLM's model runner, as VLLM_USE_V2_MODEL_RUNNER=0 / 1 forces it (default: the one the release runs the "
         "model on; V2 is the only one from 0.34)")]
DRAFT_TREE_HELP = ("Draft a tree instead of a chain: STEPS,TOPK,TOKENS (e.g. 4,4,16) = STEPS draft passes keeping "
                   "TOPK candidates per sequence, TOKENS draft tokens verified (+1 root: SGLang's "
                   "--speculative-num-draft-tokens is TOKENS+1). Replaces the K axis (tree or plain decoding); "
                   "acceptance is the AL measured with the tree: -a al=2.55@tree. eagle, eagle3, mtp, draft-model")
DraftTreeOpt = Annotated[Optional[str], Option("--draft-tree", metavar="STEPS,TOPK,TOKENS",
                                               help=DRAFT_TREE_HELP)]
TREE_FAMILY_HELP = ("A family of draft trees, each with the mean acceptance length measured with it: "
                    "STEPS,TOPK,TOKENS@AL items separated by ';', e.g. \"3,3,4@2.017;4,4,16@2.542;7,10,64@3.034\". "
                    "Prints the best tree (or plain decoding) per batch size, its ranges and the gain over the best "
                    "single tree (table, json, csv). Replaces --draft-tree and -a (each tree brings its AL)")
TreeFamilyOpt = Annotated[Optional[str], Option("--tree-family", metavar="STEPS,TOPK,TOKENS@AL;...",
                                                help=TREE_FAMILY_HELP)]
TOLERANCE_HELP = (f"Goodput any batch size may give up against its best K so that the K table has fewer ranges: a "
                  f"fraction (0.005) or a percentage (0.5%); 0 = the exact best K per batch size. Default "
                  f"{100 * DEFAULT_TOLERANCE:g}%")
Tolerance = Annotated[Optional[str], Option("--tolerance", metavar="FRACTION|PERCENT%", help=TOLERANCE_HELP)]
MaxRanges = Annotated[Optional[int], Option(
    "--max-ranges", metavar="N", help=f"Range budget: where the tolerance still leaves more than N ranges, export the "
                                      f"table of at most N ranges with the most goodput over the batch sizes (the "
                                      f"output says what it gives up, mean and worst, against the exact table); 0 = "
                                      f"the exact table. Default {DEFAULT_MAX_RANGES}")]
BatchWeights = Annotated[Optional[Path], Option(
    "--batch-weights", metavar="FILE", help="Weigh the range budget's goodput by the share of serving time at each "
                                            "batch size: a CSV batch_size,weight; a JSON {batch: weight}; the JSON "
                                            "of dsdsim simulate (its batch_seconds); or scrapes of vLLM's "
                                            "/metrics (vllm:num_requests_running samples). Default: every batch "
                                            "size alike")]
DpAttention = Annotated[bool, Option(
    "--dp-attention", help="MLA models on tp >= 2: data-parallel attention as SGLang runs it (each GPU attends for "
                           "its own B/tp sequences with all heads and holds attention weights whole; MoE tokens "
                           "move by all-to-all under --ep). Default: tensor-parallel attention, as vLLM runs it")]

FixedK = Annotated[Optional[int], Option(
    "--fixed-k", help="The static K to compare against (default: 3, or --max-k if lower)")]
MaxDistinctK = Annotated[Optional[int], Option(
    "--max-distinct-k", min=1, help="At most this many distinct K in the table (each is a CUDA-graph capture)")]
AcceptanceBand = Annotated[Optional[float], Option(
    "--acceptance-band", help="+/- change of every alpha: adds a robust K choice and its regret")]

Robust = Annotated[bool, Option(
    "--robust", help="Choose each batch size's K by the low end of its gain interval (the K that still pays most "
                     "if the step-time ratio sits at the high end of its 80% interval from held-out corpus pairs) "
                     "instead of the point estimate; the margins table says which rule chose each range")]

# The K policy's options (dsdsim.policy.options.PredictOptions) by field: the API object carries the defaults.
PREDICT_OPTIONS = {"acceptance": Acceptance, "context": Context, "batch_sizes": BatchSizes, "max_k": MaxK,
                   "fixed_k": FixedK, "max_distinct_k": MaxDistinctK, "acceptance_band": AcceptanceBand,
                   "tolerance": Tolerance, "robust": Robust, "max_ranges": MaxRanges,
                   "batch_weights": BatchWeights}


@frozen
class SimulatedArgs:
    """What is simulated: the options explain, predict, plan and the plots share (declared here once)."""

    model: Model = DEFAULT_MODEL
    hardware: Hardware = DEFAULT_HARDWARE
    drafter: OptionalDrafter = DEFAULT_DRAFTER
    draft_tree: DraftTreeOpt = DEFAULT_DRAFT_TREE
    engine: Engine = DEFAULT_ENGINE
    model_runner: ModelRunner = None

    def __post_init__(self) -> None:
        if self.model_runner is not None:       # the engine spec that prices the runner asked for, by its name
            object.__setattr__(self, "engine", engine_for_runner(self.engine, self.model_runner))

    def drafter_spec(self):
        """The drafter with its --draft-tree (None for ``-d none``)."""
        return drafter_from_options(self.drafter, self.draft_tree)


@frozen
class DeploymentArgs:
    """How the model is served: the deployment options every simulating command takes."""

    tp: Tp = 1
    ep: Ep = 1
    dtype: WeightDType = None
    kv_dtype: KvDType = DEFAULT_KV_DTYPE
    expert_overlap: ExpertOverlap = None
    eager: Eager = False
    memory_utilization: MemoryUtilization = DEFAULT_MEMORY_UTILIZATION
    dp_attention: DpAttention = DEFAULT_DP_ATTENTION
    pp: Pp = 1

    def deployment(self, tp: Optional[int] = None, ep: Optional[int] = None, pp: Optional[int] = None):
        """The Deployment (``tp``/``ep``/``pp`` override these options: a plan candidate's), one-line errors."""
        return deployment_from_options(self.tp if tp is None else tp, self.ep if ep is None else ep, self.dtype,
                                       self.kv_dtype, self.expert_overlap, self.eager, self.memory_utilization,
                                       self.dp_attention, self.pp if pp is None else pp)


# --- where results go ---------------------------------------------------------------------------------

Output = Annotated[Optional[Path], Option("--output", "-o", help="Write to this file instead of stdout")]
PngOutput = Annotated[Path, Option("--output", "-o", help="PNG file to write")]
Plot = Annotated[Optional[Path], Option("--plot", help="Also draw a figure into this PNG file")]
ShowFmt = Annotated[ShowFormat, Option("--format", "-f", help="table | json")]
TableFmt = Annotated[TableFormat, Option("--format", "-f", help="table | json | csv")]
PredictFmt = Annotated[PredictFormat, Option(
    "--format", "-f", help="table | json | csv | vllm | vllm-batch-stats | sglang | trtllm")]

# --- measuring (torch) --------------------------------------------------------------------------------

Device = Annotated[str, Option("--device", help="torch device: cpu, cuda, cuda:1")]


def drafter_from_options(drafter: Optional[str], draft_tree: Optional[str]):
    """The drafter (None for none) with the --draft-tree shape attached; one-line errors."""
    from dsdsim.specs.drafter import parse_draft_tree, parse_drafter, with_tree

    if drafter in (None, "", "none"):
        if draft_tree is not None:
            raise DsdsimError("--draft-tree needs a drafter that drafts it (-d eagle3, eagle, mtp or draft-model:MODEL)")
        return None
    spec = parse_drafter(drafter)
    if draft_tree is None:
        return spec
    return with_tree(spec, parse_draft_tree(draft_tree))


def deployment_from_options(tp: int, ep: int, dtype: Optional[str], kv_dtype: str,
                            expert_overlap: Optional[float],
                            eager: bool = False, memory_utilization: float = 0.9, dp_attention: bool = False,
                            pp: int = 1):
    """A Deployment from the shared options, with one-line errors naming the option."""
    from pydantic import ValidationError

    from dsdsim.errors import pydantic_one_line
    from dsdsim.specs.deployment import Deployment
    from dsdsim.units import parse_dtype

    if tp < 1 or ep < 1 or pp < 1:
        raise DsdsimError(f"--tp, --ep and --pp must be >= 1 (got tp={tp}, ep={ep}, pp={pp})")
    if expert_overlap is not None and not 0.0 <= expert_overlap < 1.0:
        raise DsdsimError(f"--expert-overlap must be in [0, 1), got {expert_overlap}")
    if not 0.0 < memory_utilization <= 1.0:
        raise DsdsimError(f"--memory-utilization (vLLM's --gpu-memory-utilization) must be in (0, 1], got {memory_utilization}")
    w_dtype, c_dtype = (parse_dtype(dtype) if dtype else None), parse_dtype(kv_dtype)
    try:
        return Deployment(tp=tp, ep=ep, dtype=w_dtype, kv_dtype=c_dtype, expert_overlap=expert_overlap,
                          cuda_graphs=not eager, memory_utilization=memory_utilization,
                          dp_attention=dp_attention, pp=pp)
    except ValidationError as exc:
        raise DsdsimError(pydantic_one_line(exc, "deployment")) from None


def engine_for_runner(engine: str, runner: str) -> str:
    """The engine spec name pricing vLLM model runner ``runner`` (v1 / v2) for the release ``engine`` names
    (``vllm``, ``vllm@0.26``); refused for another engine, and for V1 from 0.34, which removed it."""
    from dsdsim.specs.catalog import load_engine
    from dsdsim.specs.runners import runner_engine

    runner = str(runner).strip().lower()
    if runner not in ("v1", "v2"):
        raise DsdsimError(f"--model-runner {runner!r}: write v1 or v2 (vLLM's VLLM_USE_V2_MODEL_RUNNER=0 / 1)")
    spec = load_engine(engine)
    family, at, version = str(engine).strip().partition("@")
    if family.strip() != "vllm" or spec.runner is None:
        raise DsdsimError(f"--model-runner is vLLM's (V1 or V2 from 0.24); engine {engine!r} has no model runner "
                          "to choose")
    version = version.strip() if at else spec.versions.first
    from dsdsim.specs.catalog import resolve_engine_name

    # the runner's own spec by file name (a name resolve would move to the release's default runner otherwise; V1
    # from 0.34 refused there)
    name = runner_engine(engine, spec, None, None, runner) or resolve_engine_name(engine)
    if load_engine(name).runner != runner:
        raise DsdsimError(f"no shipped vLLM spec prices model runner {runner.upper()} for {version} (V2 is priced from "
                          "0.24, the first release with a K table: docs/engine_graphs.md); drop --model-runner")
    return name


def step_from_options(sim: SimulatedArgs, dep, batch: int, k: int, context: int, k_table: bool = False):
    """(the Setup, one simulated step) from the shared options: sizes checked, K = 0 plain decoding, any K >= 1 the
    draft tree when there is one. ``k_table``: the step of a server running a dynamic K table at this K (what predict's rows
    price; K = 0 is then the table's off tier, the drafter kept), refused where the engine reads no such table."""
    from dsdsim.cost.step import simulate_step

    if batch < 1:
        raise DsdsimError(f"--batch must be >= 1, got {batch}")
    if k < 0:
        raise DsdsimError(f"--k must be >= 0, got {k}")
    if context < 0:
        raise DsdsimError(f"--context must be >= 0, got {context}")
    d = sim.drafter_spec()
    if k_table and d is None:
        raise DsdsimError("--k-table prices a server running a K table, which needs a drafter: drop -d none")
    if k == 0 and not k_table:
        d = None
    elif d is not None and d.tree is not None:
        k = d.tree.steps              # the tree, whatever K >= 1 was asked for
    from dsdsim.policy.predict import check_context
    from dsdsim.specs.setup import resolve

    setup = resolve(sim.model, sim.hardware, dep, d, sim.engine)
    if k_table and not (setup.engine is not None and setup.engine.supports_off_tier):
        name = "no engine" if setup.engine is None else f"{setup.engine.name} {setup.engine.version_label}"
        raise DsdsimError(f"--k-table: the {name} spec prices no server of its own for a K table (predict prices "
                          "each K as a fixed-K server there, as explain does without --k-table)")
    context = check_context(context, setup)        # within the model's window, as predict has it
    return setup, simulate_step(None, None, batch=batch, k=k, context=context, setup=setup, dynamic=k_table)
