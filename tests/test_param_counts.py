"""Parameter counts of every shipped model spec against the figures its publisher gives.

What dsdsim counts (``dsdsim.specs.model.ModelSpec``), in weight elements:

* ``params_total``: every weight of the text model, input embedding and lm_head included (once when tied),
  MTP / next-n modules excluded. Vision towers of multimodal checkpoints are not part of the spec.
* ``params_active``: the weights one token touches: attention, norms, routers, ``top_k`` routed experts plus
  the shared experts, dense FFNs, the input embedding table and the lm_head.
* ``params_embedding`` (V*H), ``params_lm_head`` (0 when tied), ``params_mtp`` (0 without MTP).

Publishers do not agree on what "active" means, so every row names the definition its source uses and the
test converts our count to it (never the other way round):

* ``"all"``: embedding and lm_head included, i.e. ``params_active``.
* ``"no_input_embedding"``: the unembedding (lm_head) counted, the embedding lookup not:
  ``params_active - params_embedding``. OpenAI states this for gpt-oss.
* ``"no_embeddings"``: neither: ``params_active - params_embedding - params_lm_head``.
* ``"dense"``: a dense model; no separate active figure is published and active must equal total.

Where a source does not state its definition, the row says which definition reproduces the figure and marks it
inferred. Tolerance is 1.5% relative. A published figure that this tolerance cannot fairly test (two
significant figures, off by its own rounding) is kept in the table as a strict xfail with the reason, so a
change of either side is noticed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

REL_TOL = 0.015
SPECS_DIR = Path(__file__).resolve().parents[1] / "model_specs"
B = 1e9


@dataclass(frozen=True)
class Published:
    name: str
    total: float                 # published total parameters (elements)
    active: Optional[float]      # published active parameters per token; None for dense models
    active_def: str              # "all" | "no_input_embedding" | "no_embeddings" | "dense"
    source: str                  # where the figures are published
    note: str = ""               # what the source counts, and anything inferred


PUBLISHED: list[Published] = [
    # --- Llama 3.x (dense; tied only for 3.2) ---------------------------------------------------
    Published("llama-3.1-8b", 8.03 * B, None, "dense",
              "https://huggingface.co/meta-llama/Llama-3.1-8B (model page: 8.03B params, safetensors count); "
              "https://github.com/meta-llama/llama-models/blob/main/models/llama3_1/MODEL_CARD.md (8B)"),
    Published("llama-3.1-70b", 70.6 * B, None, "dense",
              "https://huggingface.co/meta-llama/Llama-3.1-70B (model page: 70.6B params, safetensors count)"),
    Published("llama-3.1-405b", 405 * B, None, "dense",
              "https://github.com/meta-llama/llama-models/blob/main/models/llama3_1/MODEL_CARD.md (405B)",
              "Rounded name-size figure; the config counts 405.85B (+0.2%). With 16 KV heads (early mirrors) it "
              "would be 406.9B, also inside the tolerance, so this test cannot tell 8 from 16 KV heads."),
    Published("llama-3.2-1b", 1.23 * B, None, "dense",
              "https://github.com/meta-llama/llama-models/blob/main/models/llama3_2/MODEL_CARD.md "
              "(table: '1B (1.23B)', shared embeddings)",
              "Tied embeddings: the table counts the shared embedding/unembedding matrix once, as we do."),
    Published("llama-3.2-3b", 3.21 * B, None, "dense",
              "https://github.com/meta-llama/llama-models/blob/main/models/llama3_2/MODEL_CARD.md "
              "(table: '3B (3.21B)', shared embeddings)"),
    Published("llama-3.3-70b", 70.6 * B, None, "dense",
              "https://huggingface.co/meta-llama/Llama-3.3-70B-Instruct (model page: 70.6B params, safetensors count)"),
    Published("llama-3-8b", 8.03 * B, None, "dense",
              "https://huggingface.co/meta-llama/Meta-Llama-3-8B (model page: 8.03B params, safetensors count)"),
    Published("llama-3-70b", 70.6 * B, None, "dense",
              "https://huggingface.co/meta-llama/Meta-Llama-3-70B (model page: 70.6B params, safetensors count)"),
    # --- Llama 2 shapes and their small draft ---------------------------------------------------------
    Published("llama-2-7b", 6.74 * B, None, "dense",
              "https://huggingface.co/meta-llama/Llama-2-7b-hf (model page: 6.74B params, safetensors count)"),
    Published("llama-2-7b-32k", 6.74 * B, None, "dense",
              "https://huggingface.co/meta-llama/Llama-2-7b-hf (6.74B); https://together.ai/blog/llama-2-7b-32k "
              "(LLaMA-2-7B-32K is Llama-2-7B continued with position interpolation: same weight shapes)",
              "The Together model page states no count of its own; the figure is the base model's."),
    Published("tinyllama-1.1b", 1.1 * B, None, "dense",
              "https://huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0 (card: 'only 1.1B parameters')",
              "Config counts 1.100B."),
    # --- Qwen (non-embedding figures are tested separately below) ---------------------------------
    Published("qwen2-0.5b", 0.49 * B, None, "dense",
              "https://qwenlm.github.io/blog/qwen2/ (model table: Qwen2-0.5B 0.49B params)",
              "Tied embeddings, counted once: 0.494B."),
    Published("qwen2-57b-a14b", 57.41 * B, 14 * B, "all",
              "https://qwenlm.github.io/blog/qwen2/ (model table: Qwen2-57B-A14B 57.41B params); arXiv:2407.10671 "
              "(Qwen2 technical report: 57B total, 14B activated)",
              "Active with embedding and lm_head is 14.25B (+1.8%); 14B is two significant figures."),
    Published("qwen2.5-7b", 7.61 * B, None, "dense",
              "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct (card: 'Number of Parameters: 7.61B')"),
    Published("qwen2.5-72b", 72.7 * B, None, "dense",
              "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct (card: 'Number of Parameters: 72.7B')"),
    Published("qwen3-0.6b", 0.6 * B, None, "dense",
              "https://huggingface.co/Qwen/Qwen3-0.6B (card: 'Number of Parameters: 0.6B')",
              "Tied: 0.596B with the embedding counted once (the checkpoint stores a duplicate lm_head, 0.75B "
              "stored). The precise figure is the non-embedding 0.44B, tested below."),
    Published("qwen3-8b", 8.2 * B, None, "dense",
              "https://huggingface.co/Qwen/Qwen3-8B (card: 'Number of Parameters: 8.2B')"),
    Published("qwen3-32b", 32.8 * B, None, "dense",
              "https://huggingface.co/Qwen/Qwen3-32B (card: 'Number of Parameters: 32.8B')"),
    Published("qwen3-30b-a3b", 30.5 * B, 3.3 * B, "all",
              "https://huggingface.co/Qwen/Qwen3-30B-A3B (card: '30.5B in total and 3.3B activated'); "
              "https://docs.vllm.ai/projects/ascend/ (Qwen3-30B-A3B tutorial: 30.5B / 3.3B)",
              "Activated includes embedding and lm_head (the only reading near 3.3B: 3.353B; without the "
              "embedding it would be 3.04B). 3.3B is two significant figures truncated from 3.35B: +1.6%."),
    Published("qwen3-235b-a22b", 235 * B, 22 * B, "all",
              "https://huggingface.co/Qwen/Qwen3-235B-A22B (card: '235B in total and 22B activated'); "
              "NeMo docs (235B / 22B)",
              "Activated includes embedding and lm_head: 22.19B (+0.9%); without the embedding 21.57B would also "
              "pass, so the definition is not pinned by this figure."),
    Published("qwen3-next-80b-a3b", 80 * B, 3 * B, "no_embeddings",
              "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct (card: 'Number of Parameters: 80B in total "
              "and 3B activated', 'Non-Embedding: 79B'); transformers docs model_doc/qwen3_next ('80B total "
              "parameters, only 3B active')",
              "Total 79.674B (-0.4%) without the MTP layer (1.650B; the spec declares num_nextn_predict_layers 1, "
              "which the release's config leaves out): 36 gated DeltaNet layers of 33.72M, 12 gated-attention layers "
              "of 27.26M, 48 MoE blocks of 1614.8M, embedding and lm_head 311.2M each. Active 3.253B without "
              "embedding and lm_head (3.875B with both): 'A3B' names the size class."),
    Published("qwen3.5-397b-a17b", 397 * B, 17 * B, "all",
              "https://huggingface.co/Qwen/Qwen3.5-397B-A17B (card: '397B in total and 17B activated', not fetched); "
              "https://docs.sglang.io/cookbook/autoregressive/Qwen/Qwen3.5 ('397B total parameters, 17B activated')",
              "Total 396.346B (-0.16%): the text model without the MTP layer (6.596B) and without the vision tower, "
              "which the 397B includes. Activated read as Qwen3-30B-A3B's (embedding and lm_head included): "
              "17.349B."),
    Published("qwen3.6-35b-a3b", 35 * B, 3 * B, "no_input_embedding",
              "https://huggingface.co/Qwen/Qwen3.6-35B-A3B (card: 'Number of Parameters: 35B in total and 3B "
              "activated', not fetched; quoted verbatim at https://mera.a-ai.ru/en/industrial/submits/181)",
              "Total 34.661B (-1.0%): the text model without the MTP layer (0.845B) and the vision tower. No "
              "definition reproduces 3B: 2.946B without the input embedding (the nearest, -1.8%), 3.455B with "
              "embedding and lm_head, 2.438B without both."),
    # --- Mistral ------------------------------------------------------------------------------------
    Published("mixtral-8x7b", 46.7 * B, 12.9 * B, "all",
              "https://mistral.ai/news/mixtral-of-experts ('46.7B total parameters but only uses 12.9B "
              "parameters per token')",
              "Per-token figure includes embedding and lm_head (12.88B; without the embedding 12.75B, -1.2%)."),
    Published("mixtral-8x22b", 141 * B, 39 * B, "all",
              "https://mistral.ai/news/mixtral-8x22b ('only 39B active parameters out of 141B')",
              "Spec is the v0.1 base config (vocab 32000); the Instruct vocab 32768 adds 12.6M (<0.01%)."),
    Published("mistral-large-2", 123 * B, None, "dense",
              "https://huggingface.co/mistralai/Mistral-Large-Instruct-2411 (card: 'dense Large Language Model "
              "(LLM) of 123B parameters')",
              "Config counts 122.61B (-0.3%)."),
    # --- DeepSeek / Kimi (MLA) ----------------------------------------------------------------------
    Published("deepseek-v3", 671 * B, 37 * B, "all",
              "https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md (main model 671B, MTP "
              "excluded); arXiv:2412.19437 abstract ('671B total parameters with 37B activated for each token')",
              "README_WEIGHTS defines activated as including the 0.9B embedding and 0.9B head, which gives "
              "37.55B (+1.5%, at the edge of the tolerance). Its own precise value, 36.7B, does not match that "
              "definition (-2.3%); it equals the count without the input embedding (36.63B). We test the paper's "
              "37B under the README's stated definition; the 36.7B discrepancy is the README's, not the config's."),
    Published("deepseek-v3.2-exp", 671 * B, 37 * B, "all",
              "https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp (card: built on DeepSeek-V3.1-Terminus, the "
              "DeepSeek-V3 architecture with the DSA indexer added; model page 685B params, safetensors count); "
              "arXiv:2412.19437 abstract (the V3 architecture: 671B total, 37B activated)",
              "The indexer adds 61 x 13.96M = 0.85B: 671.88B (+0.13%), 38.40B active (+3.8% of 37B, the same "
              "reading as deepseek-v3's row gives 37.55B + 0.85B). The 685B of the model page is the checkpoint: "
              "params_total + params_mtp + the MTP module's own copies of embedding and head (2 x 0.93B) = "
              "685.36B, tested apart."),
    Published("deepseek-v2-lite", 15.7 * B, 2.4 * B, "no_input_embedding",
              "arXiv:2405.04434 (DeepSeek-V2, Appendix: 'DeepSeek-V2-Lite has 15.7B parameters in total, where "
              "2.4B are activated for each token'); https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite (16B / 2.4B)",
              "Definition inferred: DeepSeek's activated counts exclude the input embedding (see deepseek-v3 and "
              "DeepSeek-V2 236B/21B). That gives 2.45B (+2.1%); with embedding 2.66B, without both 2.24B. 2.4B is "
              "two significant figures, apparently truncated."),
    Published("glm-5", 744 * B, 40 * B, "no_embeddings",
              "https://huggingface.co/zai-org/GLM-5 (card: 'scaling from 355B parameters (32B active) to 744B "
              "parameters (40B active)')",
              "Total 743.91B (-0.01%) without the MTP layer (9.95B): all 78 layers run the lightning indexer "
              "(9.37M each). Active definition inferred, GLM-4.5's: 39.88B without embedding and lm_head (-0.3%); "
              "40.83B without the input embedding (+2.1%), 41.79B with both."),
    Published("glm-5.2", 744 * B, 40 * B, "no_input_embedding",
              "https://huggingface.co/zai-org/GLM-5 (card: 'scaling from 355B parameters (32B active) to 744B "
              "parameters (40B active)'); GLM-5.2 is the same glm_moe_dsa architecture with IndexShare",
              "Total 743.38B (-0.08%) without the MTP layer (9.95B): 21 of 78 layers run the lightning indexer "
              "(9.37M each); the 57 shared layers own none (all-full GLM-5 layout: 743.91B). The card is GLM-5's, "
              "not GLM-5.2's. Active definition inferred: 40.30B without the input embedding reproduces 40B "
              "(41.25B with it, +3.1%)."),
    Published("kimi-k2", 1.04e12, 32 * B, "no_input_embedding",
              "arXiv:2507.20534 (Kimi K2 tech report: '1.04 trillion total parameters', '32 billion activated'); "
              "https://huggingface.co/moonshotai/Kimi-K2-Instruct (card: 1T total, 32B activated)",
              "Total: the released checkpoint holds 1.0264T weights (-1.3% from 1.04T; 61 layers, 1 dense, no "
              "MTP). Active definition inferred: with embedding and head the config gives 32.86B (+2.7%), "
              "without the input embedding 31.69B (-1.0%), the DeepSeek-lineage convention."),
    Published("kimi-k2.6", 1.04e12, 32 * B, "no_input_embedding",
              "https://huggingface.co/moonshotai/Kimi-K2.6 (card: 1T total, 32B activated, not fetched; as summarised "
              "at https://thakicloud.github.io/en/owm/kimi-k2-6-1t-moe-agent-swarm/); arXiv:2507.20534 (Kimi K2 tech "
              "report: '1.04 trillion total parameters', '32 billion activated') for the same decoder "
              "(AI-Hypercomputer/maxtext tests/end_to_end/tpu/kimi/Run_Kimi.md: K2, K2-Thinking, K2.5 and K2.6 'share "
              "the same DeepSeek-V3-style architecture')",
              "The decoder is Kimi-K2's, weight for weight: 1.0264T (-1.3% of 1.04T; +2.6% of the card's one-figure "
              "1T, which also counts the MoonViT tower the spec leaves out). Active 31.69B without the input "
              "embedding (-1.0%), as kimi-k2."),
    # --- MiniMax ---------------------------------------------------------------------------------------
    Published("minimax-m2.5", 230 * B, 10 * B, "no_embeddings",
              "huggingface/transformers docs/source/en/model_doc/minimax_m2.md ('230 billion total parameters with "
              "10 billion active parameters'); MiniMax-AI/MiniMax-M2.5 docs/transformers_deploy_guide.md (one "
              "architecture for M2, M2.1 and M2.5)",
              "Total: the config counts 228.69B (-0.6%; no MTP weights). Active definition inferred: neither "
              "embedding nor head gives 9.80B (-2.0%), the nearest of the three."),
    # --- OpenAI gpt-oss -------------------------------------------------------------------------------
    Published("gpt-oss-20b", 20.91 * B, 3.61 * B, "no_input_embedding",
              "https://openai.com/index/gpt-oss-model-card/ (arXiv:2508.10925, Table 1: 20.91B total, 3.61B "
              "active per token)",
              "The card's active count includes the unembedding but not the embedding (stated in the card)."),
    Published("gpt-oss-120b", 116.83 * B, 5.13 * B, "no_input_embedding",
              "https://openai.com/index/gpt-oss-model-card/ (arXiv:2508.10925, Table 1: 116.83B total, 5.13B "
              "active per token)",
              "Same definition as gpt-oss-20b."),
    # --- Llama 4 (text model of a multimodal checkpoint) ----------------------------------------------
    Published("llama-4-scout", 109 * B, 17 * B, "all",
              "https://ai.meta.com/blog/llama-4-multimodal-intelligence/ ('17B active parameters, 16 experts, "
              "109B total'); https://huggingface.co/blog/llama4-release",
              "109B is the whole multimodal checkpoint, vision encoder and projector included (~0.87B by our "
              "count from vision_config); the spec counts the text model only, 107.77B (-1.1%). 17B active "
              "includes embedding and lm_head (17.17B)."),
    Published("llama-4-maverick", 400 * B, 17 * B, "all",
              "https://ai.meta.com/blog/llama-4-multimodal-intelligence/ ('17B active parameters, 128 experts, "
              "400B total'); https://huggingface.co/blog/llama4-release",
              "Text model 400.71B (+0.2%; the checkpoint with vision is ~401.6B). Active 17.18B with embedding and "
              "lm_head."),
    # --- Cohere (parallel block, tied embeddings) ------------------------------------------------------
    Published("command-r-plus", 104 * B, None, "dense",
              "https://huggingface.co/CohereForAI/c4ai-command-r-plus-08-2024 (card: '104 billion parameter "
              "model')",
              "Tied: the 256000x12288 matrix is counted once (103.81B)."),
    Published("command-a", 111.058 * B, None, "dense",
              "HF leaderboard request eduagarcia-temp/llm_pt_leaderboard_requests (Cohere2ForCausalLM, params "
              "111.058); https://huggingface.co/CohereLabs/c4ai-command-a-03-2025 (card: '111 billion parameter')",
              "NOT independent evidence: n_q, n_kv, layers, vocab and tying in the spec were inferred so that "
              "they reproduce 111.058B (see the spec's _dsdsim notes). This row guards the spec against "
              "accidental change only."),
    # --- Gemma 3 (text model; precise counts from the tech report) ------------------------------------
    Published("gemma-3-27b", (1416 + 25600) * 1e6, None, "dense",
              "arXiv:2503.19786 (Gemma 3 Technical Report, Table 1: 27B = 417M vision encoder, 1,416M embedding, "
              "25,600M non-embedding parameters)",
              "Total here is embedding + non-embedding, the text model without the 417M vision encoder; the "
              "marketed '27B' and the Hub's 27.4B include the vision tower. Table 1's embedding figure is 0.45% "
              "above 262208x5376; the non-embedding figure (tested below) matches to 0.01%."),
    # --- Gemma 4 (text model) and its MTP assistant ---------------------------------------------------
    Published("gemma-4-31b", 30.7 * B, None, "dense",
              "https://docs.api.nvidia.com/nim/reference/google-gemma-4-31b-it (model card: 'Total Parameters: "
              "30.7B'); third-party cards give '30.7B dense + ~550M vision encoder'",
              "The text model; the vision tower is not part of the spec. The config counts 30.697B, the tied "
              "262144x5376 embedding once."),
    Published("gemma-4-31b-assistant", 0.47 * B, None, "dense",
              "https://huggingface.co/google/gemma-4-31B-it-qat-q4_0-unquantized-assistant (Hub safetensors "
              "count 'params 470M', as captured by a public model-tracker page)",
              "Counts what the config implies: 4 layers that read the target's KV cache (num_kv_shared_layers 4: "
              "no k/v projections), the tied 262144x1024 embedding, and the pre_projection (2x5376 -> 1024) and "
              "post_projection (1024 -> 5376) of backbone_hidden_size: 469.5M. Without KV sharing and the "
              "projections it would be 480.3M (+2.2%), outside the tolerance."),
    # --- Zhipu GLM-4.5 ---------------------------------------------------------------------------------
    Published("glm-4.5", 355 * B, 32 * B, "no_embeddings",
              "https://huggingface.co/zai-org/GLM-4.5 (card: '355 billion total parameters with 32 billion active "
              "parameters'); arXiv:2508.06471 (GLM-4.5 report, model architecture table)",
              "Total: 352.80B without the MTP layer (-0.6%), 356.79B with it (+0.5%); the source does not say. "
              "Active definition inferred: only the count without embedding and lm_head fits (32.08B; 32.86B "
              "without the embedding only, 33.63B with both); the same reading reproduces GLM-4.5-Air's "
              "106B / 12B."),
    # --- NVIDIA Nemotron-H / Nemotron 3 (Mamba-2 hybrids) ---------------------------------------------
    Published("nemotron-h-8b", 8 * B, None, "dense",
              "https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K (card: 'This model has 8B of model parameters'); "
              "arXiv:2504.03624 (Nemotron-H: 24 Mamba-2, 24 MLP and 4 self-attention layers)",
              "The config counts 8.1009B (+1.3%): 24 Mamba-2 mixers of 109.6M, 24 ReLU^2 MLPs of 176.2M, 4 "
              "attention mixers of 41.9M, embedding and lm_head 536.9M each."),
    Published("nemotron-3-nano-30b", 31.6 * B, 3.6 * B, "all",
              "arXiv:2512.20848 (Nemotron 3 Nano report) and https://huggingface.co/nvidia/"
              "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: 31.6B total, 3.2B active, 3.6B active with embeddings, as "
              "public summaries of both quote them (the wording is not checked against the report's text)",
              "Total 31.578B (-0.07%). Active 3.580B with embedding and lm_head (-0.6% of 3.6B); the report's 3.2B "
              "is the count without the input embedding, 3.228B (+0.9%)."),
    Published("nemotron-3-super-120b", 120 * B, 12 * B, "no_input_embedding",
              "arXiv:2604.12374 (Nemotron 3 Super report: 'a 120 billion (active 12 billion) parameter hybrid "
              "Mamba-Attention Mixture-of-Experts model'); https://research.nvidia.com/labs/nemotron/Nemotron-3-Super "
              "('12B active 120B total')",
              "Total 120.669B (+0.6%) without the MTP module (2.942B; 123.61B with it). Active definition as the "
              "Nano report's 3.2B: 12.233B without the input embedding; 12.770B with it, 11.697B without both."),
    # --- Microsoft Phi-3.5-MoE -------------------------------------------------------------------------
    Published("phi-3.5-moe", 41.9 * B, 6.6 * B, "all",
              "https://huggingface.co/microsoft/Phi-3.5-MoE-instruct (model page: 41.9B params, safetensors "
              "count; card: '6.6B active parameters when using 2 experts')",
              "Active includes embedding and lm_head: 6.64B (+0.6%)."),
]

# Published figures a 1.5% test cannot fairly pass: name -> reason. Kept as strict xfails.
ACTIVE_OUTSIDE_TOLERANCE = {
    "qwen2-57b-a14b": "14B is 2 significant figures; the config gives 14.249B (+1.8%) with embedding and lm_head, "
                      "13.16B (-6%) without both",
    "qwen3-30b-a3b": "3.3B is 2 significant figures; the config gives 3.353B (+1.6%) under the only definition "
                     "near it",
    "qwen3.5-397b-a17b": "17B is 2 significant figures (the 'A17B' of the name); the config gives 17.349B (+2.1%) "
                         "with embedding and lm_head, 16.332B (-3.9%) without the input embedding, 15.315B without "
                         "both",
    "qwen3.6-35b-a3b": "3B is 1 significant figure (the 'A3B' of the name); the config gives 2.946B (-1.8%) without "
                       "the input embedding, 3.455B with embedding and lm_head, 2.438B without both",
    "qwen3-next-80b-a3b": "3B is 1 significant figure (the 'A3B' of the name); the config gives 3.253B (+8.4%) "
                          "without embedding and lm_head, 3.564B without the embedding, 3.875B with both",
    "deepseek-v3.2-exp": "37B is DeepSeek-V3's figure; the indexer's 0.85B is activated for every token and takes "
                         "the count to 38.40B (+3.8%) with embedding and head, 37.48B (+1.3%) without the input "
                         "embedding, 36.55B without both; the publisher gives no figure of its own",
    "deepseek-v2-lite": "2.4B is 2 significant figures; the config gives 2.452B (+2.1%) under DeepSeek's "
                        "convention (2.661B with the embedding, 2.241B without embedding and head)",
    "minimax-m2.5": "10B is 1 significant figure; the config gives 9.801B (-2.0%) without embedding and lm_head, "
                    "10.416B (+4.2%) without the input embedding, 11.031B with both",
    "nemotron-3-super-120b": "12B is 2 significant figures (the 'A12B' of the name); the config gives 12.233B "
                                  "(+1.9%) without the input embedding, 12.770B with it, 11.697B without both",
}

# Non-embedding counts (total minus embedding and lm_head), the most precise figures for these families.
NON_EMBEDDING: list[tuple[str, float, str]] = [
    ("qwen2.5-7b", 6.53 * B, "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct (card: 'Non-Embedding: 6.53B')"),
    ("qwen2.5-72b", 70.0 * B, "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct (card: 'Non-Embedding: 70.0B')"),
    ("qwen3-0.6b", 0.44 * B, "https://huggingface.co/Qwen/Qwen3-0.6B (card: 'Non-Embedding: 0.44B')"),
    ("qwen3-8b", 6.95 * B, "https://huggingface.co/Qwen/Qwen3-8B (card: 'Non-Embedding: 6.95B')"),
    ("qwen3-32b", 31.2 * B, "https://huggingface.co/Qwen/Qwen3-32B (card: 'Non-Embedding: 31.2B')"),
    ("qwen3-30b-a3b", 29.9 * B, "https://huggingface.co/Qwen/Qwen3-30B-A3B (card: 'Non-Embedding: 29.9B')"),
    ("qwen3-235b-a22b", 234 * B, "https://huggingface.co/Qwen/Qwen3-235B-A22B (card: 'Non-Embedding: 234B')"),
    ("qwen3-next-80b-a3b", 79 * B,
     "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct (card: 'Number of Paramaters (Non-Embedding): 79B')"),
    ("gemma-3-27b", 25600e6, "arXiv:2503.19786 (Gemma 3 Technical Report, Table 1: 25,600M non-embedding)"),
]

# MTP modules, counted apart from params_total.
MTP_PUBLISHED: list[tuple[str, float, str]] = [
    ("deepseek-v3.2-exp", 11.5 * B,
     "https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md (DeepSeek-V3's 11.5B MTP module; "
     "V3.2-Exp's adds one indexer, 14.0M: 11.62B, +1.1%)"),
    ("deepseek-v3", 11.5 * B,
     "https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md ('MTP Modules: 11.5B unique "
     "parameters, excluding the shared 0.9B Embedding and 0.9B output Head')"),
]


def _load(name: str):
    catalog = pytest.importorskip("dsdsim.specs.catalog")
    return catalog.load_model(name)


def _active_as_published(spec, definition: str) -> int:
    if definition == "all":
        return spec.params_active
    if definition == "no_input_embedding":
        return spec.params_active - spec.params_embedding
    if definition == "no_embeddings":
        return spec.params_active - spec.params_embedding - spec.params_lm_head
    raise ValueError(f"unknown active definition {definition!r}")


def _rel(ours: float, published: float) -> float:
    return (ours - published) / published


def _raw_config(name: str) -> dict:
    return json.loads((SPECS_DIR / f"{name}.json").read_text(encoding="utf-8"))


def _text_config(cfg: dict) -> dict:
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


# --- the table covers exactly the shipped specs -----------------------------------------------------------


def test_every_shipped_model_has_published_figures():
    shipped = {p.stem for p in SPECS_DIR.glob("*.json")}
    tabled = [p.name for p in PUBLISHED]
    assert len(tabled) == len(set(tabled)), "duplicate rows in PUBLISHED"
    assert shipped == set(tabled), (f"specs without published figures: {sorted(shipped - set(tabled))}; "
                                    f"rows without a spec: {sorted(set(tabled) - shipped)}")


@pytest.mark.parametrize("path", sorted(SPECS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_spec_file_names_itself_and_its_source(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    meta = data.get("_dsdsim")
    assert isinstance(meta, dict), "every spec carries a _dsdsim block"
    assert meta.get("name") == path.stem
    assert meta.get("source"), "every spec says where its config text came from"
    assert isinstance(data.get("model_type"), str)


# --- published totals and active counts ---------------------------------------------------------------


@pytest.mark.parametrize("row", PUBLISHED, ids=lambda r: r.name)
def test_total_params_match_published(row: Published):
    spec = _load(row.name)
    rel = _rel(spec.params_total, row.total)
    assert abs(rel) <= REL_TOL, (f"{row.name}: params_total {spec.params_total / B:.3f}B vs published "
                                 f"{row.total / B:.3f}B ({rel:+.2%}); source: {row.source}")


def _active_cases():
    for row in PUBLISHED:
        if row.active is None:
            continue
        marks = ()
        if row.name in ACTIVE_OUTSIDE_TOLERANCE:
            marks = pytest.mark.xfail(strict=True, reason=ACTIVE_OUTSIDE_TOLERANCE[row.name])
        yield pytest.param(row, id=row.name, marks=marks)


@pytest.mark.parametrize("row", list(_active_cases()))
def test_active_params_match_published(row: Published):
    spec = _load(row.name)
    ours = _active_as_published(spec, row.active_def)
    rel = _rel(ours, row.active)
    assert abs(rel) <= REL_TOL, (f"{row.name}: active ({row.active_def}) {ours / B:.3f}B vs published "
                                 f"{row.active / B:.3f}B ({rel:+.2%}); source: {row.source}")


@pytest.mark.parametrize("name,published,source", NON_EMBEDDING, ids=[n for n, _, _ in NON_EMBEDDING])
def test_non_embedding_params_match_published(name, published, source):
    spec = _load(name)
    ours = spec.params_total - spec.params_embedding - spec.params_lm_head
    rel = _rel(ours, published)
    assert abs(rel) <= REL_TOL, (f"{name}: non-embedding {ours / B:.3f}B vs published {published / B:.3f}B "
                                 f"({rel:+.2%}); source: {source}")


@pytest.mark.parametrize("name,published,source", MTP_PUBLISHED, ids=[n for n, _, _ in MTP_PUBLISHED])
def test_mtp_params_match_published(name, published, source):
    spec = _load(name)
    rel = _rel(spec.params_mtp, published)
    assert abs(rel) <= REL_TOL, (f"{name}: params_mtp {spec.params_mtp / B:.3f}B vs published "
                                 f"{published / B:.3f}B ({rel:+.2%}); source: {source}")


# --- invariants the definitions imply -------------------------------------------------------------------


@pytest.mark.parametrize("row", PUBLISHED, ids=lambda r: r.name)
def test_active_is_total_for_dense_and_less_for_moe(row: Published):
    spec = _load(row.name)
    if row.active_def == "dense":
        assert spec.params_active == spec.params_total
    else:
        assert spec.params_embedding < spec.params_active < spec.params_total


@pytest.mark.parametrize("row", PUBLISHED, ids=lambda r: r.name)
def test_embedding_head_and_mtp_follow_the_config(row: Published):
    spec = _load(row.name)
    cfg = _text_config(_raw_config(row.name))
    assert spec.params_embedding == cfg["vocab_size"] * cfg["hidden_size"]
    tied = cfg.get("tie_word_embeddings", cfg["model_type"] in ("cohere", "cohere2", "gemma3_text"))
    if tied:
        assert spec.params_lm_head == 0
    else:
        head_bias = cfg["vocab_size"] if cfg.get("lm_head_bias") else 0
        assert spec.params_lm_head == spec.params_embedding + head_bias
    if cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers"):      # Qwen3.5: the latter
        assert spec.params_mtp > 0
    else:
        assert spec.params_mtp == 0


def test_deepseek_v32_checkpoint_matches_its_model_page():
    """https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp lists 685B params (the safetensors count): the main
    model, the MTP module (layer 61) and that module's own copies of the embedding and the shared head, which the
    checkpoint stores again (DeepSeek-V3 README_WEIGHTS.md: the MTP module holds embed_tokens and shared_head)."""
    spec = _load("deepseek-v3.2-exp")
    stored = spec.params_total + spec.params_mtp + spec.params_embedding + spec.params_lm_head
    assert abs(_rel(stored, 685 * B)) <= 0.005, f"{stored / B:.2f}B vs 685B"
