"""Training: the exact merge engine, ``train`` / ``train_from_counts`` in process, and the planning
and replay of exact rounds with the driver budget.
"""
