"""Hugging Face's GPT-2 (``transformers``' ``GPT2LMHeadModel``, built from a ``GPT2Config``: nothing is
downloaded) as ``model=custom``; ``pip install 'initnorm[hf]'`` installs transformers.

    PYTHONPATH=. python -m initnorm.train model=custom model._target_=examples.hf_gpt2.gpt2 \\
        model.width_arg=n_embd model.depth_arg=n_layer model.context_arg=n_positions model.blocks=transformer.h \\
        +model.n_head=2 param=mup width=64 model.base_width=16

GPT-2 stores its projections as ``Conv1D`` weights of shape (in, out), which initnorm reads and
initialises transposed; its embedding is tied to the readout, and it returns an object with
``.logits``. Its attention scale (1/sqrt(head size)) has no multiplier to set, so µP's 1/d_k is not
applied and the run says so in one line.
"""

from transformers import GPT2Config, GPT2LMHeadModel


def gpt2(vocab_size: int, n_embd: int, n_layer: int = 2, n_head: int = 2, n_positions: int = 64) -> GPT2LMHeadModel:
    """A small GPT-2 without dropout (a stochastic forward would make two runs of one seed differ)."""
    config = GPT2Config(vocab_size=vocab_size, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=n_positions,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    return GPT2LMHeadModel(config)
