"""kvpolicy from Python: eviction policies, the tiered cache, the simulator.

Built from kvpolicy's C++ headers (nanobind); every call runs the same C++
code as a C++ engine would. Errors are kvpolicy.Error subclasses carrying the
C++ message (ConfigError and UsageError are also ValueErrors, CapacityError a
RuntimeError).
"""

from ._kvpolicy import (
    CapacityError,
    ConfigError,
    Error,
    EvictionPolicy,
    ParseError,
    UnknownNameError,
    UsageError,
    VictimBatchSelector,
    policies,
    policy_options,
    select_victims,
)

__all__ = [
    "CapacityError",
    "ConfigError",
    "Error",
    "EvictionPolicy",
    "ParseError",
    "UnknownNameError",
    "UsageError",
    "VictimBatchSelector",
    "policies",
    "policy_options",
    "select_victims",
]
