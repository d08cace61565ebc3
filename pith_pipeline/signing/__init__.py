"""Signer back ends: the local key file (default); KMS ones arrive in their own modules."""
