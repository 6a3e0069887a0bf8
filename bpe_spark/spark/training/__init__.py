"""Training on Spark: counting pretokens, driver-mode training, exact rounds and checkpoints.
"""
