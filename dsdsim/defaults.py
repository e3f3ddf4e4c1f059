"""Shipped defaults of every command and API entry point (one place, so docs and code agree).

llama-3.1-8b on h100-sxm with an EAGLE-3 head: a common dense model with a public EAGLE-3 head
(yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) on the most common datacenter GPU.
"""
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_DRAFTER = "eagle3"
DEFAULT_CONTEXT = 1024               # tokens already in each sequence's KV cache
DEFAULT_MAX_K = 8                    # largest K predict and plan consider
DEFAULT_FIXED_K = 3                  # the static K predict compares against
DEFAULT_ENGINE = "vllm"              # engine spec (engine_specs/) predict, explain, plan and plot use
DEFAULT_BATCH_SIZES = "1-1024"       # batch sizes predict and plan evaluate
DEFAULT_TOLERANCE = 0.005            # goodput a K table may give up at any batch size for fewer ranges (0 = exact)
DEFAULT_MAX_RANGES = 5               # ranges a K table may have (vLLM's DSD users write 3-5; 0 = the exact table)
RANGE_LOSS_CAP = 0.02                # under a range budget, every batch size within 2% of its best K where N allow
CAP_RESOLUTION = 1e-4                # where no budget table meets RANGE_LOSS_CAP, its least worst loss is found to 0.01%
DEFAULT_KV_DTYPE = "bf16"
DEFAULT_MEMORY_UTILIZATION = 0.9     # share of GPU memory an engine may use (vLLM's gpu_memory_utilization)
DEFAULT_DRAFT_TREE = None            # chains of K draft tokens; a tree is STEPS,TOPK,TOKENS (e.g. "4,4,16")
DEFAULT_DP_ATTENTION = False         # tensor-parallel attention (vLLM); True: SGLang's data-parallel attention

# One speculative step (explain, plot roofline)
DEFAULT_STEP_K = 3
DEFAULT_EXPLAIN_BATCH = 1
DEFAULT_ROOFLINE_BATCH = 8

# plot sensitivity
DEFAULT_SENSITIVITY_ALPHAS = "0.6,0.7,0.8,0.9"
DEFAULT_SENSITIVITY_CONTEXTS = "1024,8192"
DEFAULT_SENSITIVITY_BATCH_SIZES = "1-512"

# The real speculative loop on small random-weight models (dsdsim loop)
DEFAULT_LOOP_K = 4
DEFAULT_LOOP_BATCH = 8
DEFAULT_LOOP_NEW_TOKENS = 48

# The serving simulation (dsdsim simulate, plan --simulate)
DEFAULT_WORKLOAD = "closed:64"       # 64 clients, as vllm bench serve --max-concurrency 64
DEFAULT_REQUESTS = 1000
DEFAULT_INPUT_LEN = "512"
DEFAULT_OUTPUT_LEN = "256"
DEFAULT_POLICIES = "none,fixed:3,dsd"
DEFAULT_ROUTER = "round-robin"          # simulate --router: which replica a request goes to (dsdsim.serve.fleet)
DEFAULT_SEED = 0
