"""cdc_codecs: decode every CDC protocol TiDB and MySQL tools write to Kafka into one event model.

    from cdc_codecs import get_decoder, RawMessage, SourcePosition

    decoder = get_decoder("canal-json", timezone="Asia/Shanghai")
    for event in decoder.decode(RawMessage(key, value, SourcePosition(topic, partition, offset))):
        ...

Pure Python (orjson, msgspec, fastavro): no Spark, no Airflow, no I/O of its own.
"""

from cdc_codecs._base import ClaimCheckReader, Decoder, Encoder
from cdc_codecs.errors import (
    ClaimCheckError,
    ConfigError,
    DecodeError,
    HandleKeyOnlyError,
    PendingSchemaError,
    TidelakeError,
)
from cdc_codecs.events import (
    BinlogPosition,
    Clock,
    Column,
    DdlChange,
    Event,
    Op,
    ProducerRecord,
    RawMessage,
    RowChange,
    SchemaSnapshot,
    SourcePosition,
    TableSchema,
    Watermark,
)
from cdc_codecs.registry import DECODER_VERSION, PROTOCOLS, get_decoder, get_encoder, protocol_spec
from cdc_codecs.types import ColumnType, TypeKind, parse_mysql_type, stored_type

__all__ = [
    "DECODER_VERSION",
    "PROTOCOLS",
    "BinlogPosition",
    "ClaimCheckError",
    "ClaimCheckReader",
    "Clock",
    "Column",
    "ColumnType",
    "ConfigError",
    "DdlChange",
    "DecodeError",
    "Decoder",
    "Encoder",
    "Event",
    "HandleKeyOnlyError",
    "Op",
    "PendingSchemaError",
    "ProducerRecord",
    "RawMessage",
    "RowChange",
    "SchemaSnapshot",
    "SourcePosition",
    "TableSchema",
    "TidelakeError",
    "TypeKind",
    "Watermark",
    "get_decoder",
    "get_encoder",
    "parse_mysql_type",
    "protocol_spec",
    "stored_type",
]
