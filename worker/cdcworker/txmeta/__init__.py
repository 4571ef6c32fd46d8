"""Transaction metadata: BEGIN/END records, the ``transaction`` block, ordered epochs and ranks,
and the size-reducing SMT equivalents."""

from cdcworker.txmeta.epoch import EpochError, EpochProvider, ShardEpochMap
from cdcworker.txmeta.monitor import (
    EndResult,
    TransactionMonitor,
    TxMetaOptions,
    TxOffsetFields,
    data_collection_id,
    transaction_block_payload,
)
from cdcworker.txmeta.rank import decimal_json, rank, rank_json
from cdcworker.txmeta.schemas import (
    transaction_block_schema,
    transaction_key_schema,
    transaction_value_schema,
)
from cdcworker.txmeta.transforms import (
    SizeReduction,
    local_vgtid_json,
    remove_fields_payload,
    remove_fields_schema,
)

__all__ = [
    "EndResult",
    "EpochError",
    "EpochProvider",
    "ShardEpochMap",
    "SizeReduction",
    "TransactionMonitor",
    "TxMetaOptions",
    "TxOffsetFields",
    "data_collection_id",
    "decimal_json",
    "local_vgtid_json",
    "rank",
    "rank_json",
    "remove_fields_payload",
    "remove_fields_schema",
    "transaction_block_payload",
    "transaction_block_schema",
    "transaction_key_schema",
    "transaction_value_schema",
]
