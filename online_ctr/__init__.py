"""online-ctr: streaming online learning for click-through-rate prediction."""
