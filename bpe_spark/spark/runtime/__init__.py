"""The Spark runtime: building sessions, the Python worker daemon, the JVM class cache, resources,
progress, failures, fault injection and schema checks.
"""
