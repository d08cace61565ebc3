"""The AWS region a client is made for, read the way the AWS CLI and SDKs read it.

Why here: botocore reads only `AWS_DEFAULT_REGION` (and the profile). `AWS_REGION`,
which the AWS CLI v2 and the other SDKs read first and which Lambda, ECS and many CI
runners set, was ignored: the S3 client (and with it the Delta tables and pyarrow,
which take its region) and the KMS client used another region than the operator named.
Both clients are made with this one rule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def region_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """`AWS_REGION`, else `AWS_DEFAULT_REGION`, else None (botocore then asks the
    profile). An empty value counts as unset."""
    env = os.environ if env is None else env
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
