"""The source documents' published numbers, transcribed for comparison (never as targets).

The deck: the course deck on initialisation and normalisation whose results section (§7a-§7e)
reports the tiny Decoder's experiments. The chapter: the course's chapter 003 on initialisation
(steps 1-4 and its "Across three seeds" table), with the MLP experiments.
Each table is keyed by the same swept values our summaries use, so rows line up.
"""

# Deck §7b: 6 blocks, AdamW peak 0.01, cosine, 1,500 steps; final validation loss per seed 1, 2, 3.
DECK_7B = {
    ("pre", "0"): (2.302, 2.306, 2.526),
    ("pre", "200"): (2.272, 2.395, 2.263),
    ("post", "0"): (2.950, 2.950, 2.947),
    ("post", "200"): (2.735, 2.950, 2.947),
}
DECK_7B_KEYS = ("norm", "warmup")

# Deck §7c: the default Decoder (2 blocks, width 16), three seeds.
DECK_7C = {
    ("layernorm",): (2.299, 2.354, 2.178),
    ("rmsnorm",): (2.148, 2.132, 2.141),
}
DECK_7C_KEYS = ("norm_type",)

# Deck §7e: final validation loss, mean ± sd over three seeds (the deck gives no per-seed values).
DECK_7E = {
    ("16", "0.01", "sp"): (2.420, 0.101),
    ("16", "0.03", "sp"): (2.457, 0.213),
    ("16", "0.1", "sp"): (2.656, 0.025),
    ("64", "0.01", "sp"): (2.440, 0.193),
    ("64", "0.03", "sp"): (2.531, 0.205),
    ("64", "0.1", "sp"): (2.811, 0.083),
    ("64", "0.01", "mup"): (2.314, 0.073),
    ("64", "0.03", "mup"): (2.310, 0.048),
    ("64", "0.1", "mup"): (2.682, 0.127),
}
DECK_7E_KEYS = ("width", "lr", "param")

# Deck §7a: residual-stream RMS and block gradient norms of an 8-block Decoder at init on "alice was".
DECK_7A = {
    "pre, std 0.02: stream RMS at every depth": 0.70,
    "pre, std 0.25: stream RMS entering block 1": 0.72,
    "pre, std 0.25: stream RMS leaving block 8": 4.30,
    "post: stream RMS": 1.0,
    "post: gradient norm, block 1": 1.29,
    "post: gradient norm, block 8": 2.29,
}

# Deck §7d: RMS change of the logits after 10 AdamW steps at lr 0.01.
DECK_7D = {("sp", 16): 1.43, ("sp", 256): 4.48, ("mup", 16): 1.43, ("mup", 256): 1.42}
DECK_7D_SP_STREAM_256 = 124  # "the last residual stream moves 124" (SP, width 256)

# Chapter step 1-2 probe: act std L1, act std L30, grad std L1, grad std L30 (seed 0).
CHAPTER_PROBE = {
    ("tanh", "N(0, 1)"): (9.75e-01, 9.74e-01, 7.33e12, 1.84e-01),
    ("tanh", "N(0, 0.01)"): (1.57e-01, 1.16e-24, 7.28e-24, 1.00e00),
    ("tanh", "Xavier"): (6.28e-01, 1.23e-01, 1.46e-01, 9.87e-01),
    ("relu", "N(0, 1)"): (9.35e00, 1.76e31, 1.94e30, 6.99e-01),
    ("relu", "N(0, 0.01)"): (9.35e-02, 1.76e-29, 1.94e-28, 6.99e-01),
    ("relu", "Xavier"): (5.84e-01, 1.32e-05, 2.34e-05, 6.99e-01),
    ("relu", "He"): (8.27e-01, 4.34e-01, 5.41e-01, 6.99e-01),
}

# Chapter step 2 training (seed 0): first loss, final loss (mean of last 20), validation accuracy.
CHAPTER_DEEP_MLP = {
    ("tanh", "N(0, 1)"): (2.77, 2.19, 0.120),
    ("tanh", "N(0, 0.01)"): (2.08, 2.08, 0.125),
    ("tanh", "Xavier"): (2.14, 0.0161, 0.987),
    ("tanh", "He"): (2.31, 0.00576, 0.978),
    ("relu", "N(0, 1)"): (1.16e27, float("nan"), 0.122),
    ("relu", "N(0, 0.01)"): (2.08, 2.08, 0.125),
    ("relu", "Xavier"): (2.08, 2.08, 0.125),
    ("relu", "He"): (2.69, 0.0105, 0.979),
}

# Chapter step 3 (seed 0): final train, final val, best val, gap.
CHAPTER_REGULARIZATION = {
    "no regularization": (0.115, 5.402, 2.756, 5.29),
    "dropout 0.2": (0.259, 4.023, 2.687, 3.76),
    "dropout 0.5": (1.101, 2.667, 2.529, 1.57),
    "weight decay 1.0": (1.065, 2.691, 2.576, 1.63),
}

# Chapter step 4 (seed 0): loss after 250 steps for lr = 2^-12 ... 2^-4, and the best lr's exponent.
CHAPTER_MUP = {
    ("sp", 64): (-7, 2.407, (3.35, 3.19, 2.99, 2.72, 2.50, 2.41, 2.44, 2.54, 2.78)),
    ("sp", 256): (-8, 2.321, (2.97, 2.76, 2.55, 2.39, 2.32, 2.33, 2.44, 2.58, 3.04)),
    ("sp", 1024): (-9, 2.312, (2.50, 2.38, 2.33, 2.31, 2.33, 2.50, 2.74, 3.13, 3.33)),
    ("mup", 64): (-7, 2.383, (3.16, 2.96, 2.75, 2.56, 2.42, 2.38, 2.44, 2.52, 2.97)),
    ("mup", 256): (-7, 2.262, (3.11, 2.86, 2.63, 2.45, 2.32, 2.26, 2.28, 2.35, 2.53)),
    ("mup", 1024): (-7, 2.199, (3.08, 2.79, 2.57, 2.40, 2.27, 2.20, 2.20, 2.26, 2.38)),
}

# Chapter "Across three seeds": (this page seed 0, mean, sd, (seed 0, 1, 2)), as printed.
# "Dropout 0.5, final val" is printed so, but its seed-0 value is step 3's final *train* loss of
# dropout 0.5 (1.101; its final val is 2.667): initnorm.compare sets it beside our final train loss.
CHAPTER_SEEDS = {
    "Tanh, Xavier: val accuracy": (0.987, 0.991, 0.003, (0.987, 0.993, 0.992)),
    "ReLU, Xavier: val accuracy": (0.125, 0.196, 0.064, (0.125, 0.217, 0.247)),
    "ReLU, He: val accuracy": (0.979, 0.984, 0.004, (0.979, 0.986, 0.987)),
    "No regularization, best val": (2.756, 2.728, 0.048, (2.756, 2.672, 2.756)),
    "No regularization, final val": (5.40, 5.38, 0.15, (5.40, 5.23, 5.51)),
    "Dropout 0.5, final val": (1.101, 1.138, 0.034, (1.101, 1.167, 1.145)),
    "Dropout 0.5, best val": (2.529, 2.521, 0.034, (2.529, 2.484, 2.550)),
    "Weight decay 1.0, best val": (2.576, 2.577, 0.012, (2.576, 2.565, 2.589)),
    "Width 1024 under SP, best lr (log2)": (-9, -9, 0, (-9, -9, -9)),
    "Width 1024 under muP, best lr (log2)": (-7, -6, 1, (-7, -6, -6)),
    "Width 1024 under SP, best loss": (2.312, 2.325, 0.014, (2.312, 2.339, 2.325)),
    "Width 1024 under muP, best loss": (2.199, 2.200, 0.008, (2.199, 2.208, 2.193)),
}
