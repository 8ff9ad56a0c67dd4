"""XLA's own view: the dict `cost_analysis()` returns, predicted without XLA, and (through jax,
imported only there) XLA's actual numbers to compare with."""
