"""The numbers that several parts of SpecTune must agree on, each once, with its reason. The CLI's help
texts and the app's pages read them from here rather than writing them out."""

# where in the context a decode step is predicted when the user does not say: a prompt and some of its
# answer (the recommender, a pair's prediction before it loads, `spectune predict --n-past`)
PREDICT_N_PAST = 512

# the forward-pass sizes a verify is priced at (the speed model's curve) and timed at (the tuner's
# calibration): every size up to K = 5, then steps up to K = 15
VERIFY_BATCH_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)

# the largest K a prediction and the tuner consider (a verify of 13 tokens; the Lab's K box takes any K up to
# llama.cpp's limit, engine.core.settings.MAX_DRAFT_N)
K_MAX = 12

# tokens/s a pair must reach here to be recommended: about reading speed, what "interactive" needs
DEFAULT_SPEED_FLOOR = 10.0

# the context a recommendation and a preset's memory plan are sized for when the user does not say
DEFAULT_CTX = 8192

# acceptance of a same-family draft before anything is measured, per draft position: the one prior every
# prediction of text of no known kind starts from (the recommender lowers it for a coarse draft quant). Its
# level: with it, Leviathan et al.'s formula gives the 1.71x llama.cpp measured for Llama 3.1 8B Q8_0 drafted
# by 3.2 1B Q8_0 (llama.cpp issue 5877 reports 0.72 accepted there). By kind of text the priors measured on
# a real pair replace it (engine.planning.speed.speed_model.acceptance_prior).
ACCEPTANCE_PRIOR = 0.70
