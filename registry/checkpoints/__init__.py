"""Real checkpoints in and out: the producers' tensor layouts (formats), lazy reading (reader),
`load_checkpoint`, `registry inspect` (inspect) and tensor-parallel splits (tp)."""
