"""Stand-ins for real services (a KMS-protocol server), for tests and benchmarks only.

Nothing in the runtime path imports this package.
"""
