"""Protocol name -> decoder and encoder classes. The only place protocols are listed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from cdc_codecs._base import Decoder, Encoder
from cdc_codecs.canal_json import CanalFlatDecoder, CanalFlatEncoder, CanalJsonDecoder, CanalJsonEncoder
from cdc_codecs.cloudcanal import CloudCanalJsonDecoder, CloudCanalJsonEncoder
from cdc_codecs.debezium import DebeziumDecoder, DebeziumEncoder
from cdc_codecs.dts_avro import DtsAvroDecoder, DtsAvroEncoder
from cdc_codecs.errors import ConfigError
from cdc_codecs.open_protocol import OpenProtocolDecoder, OpenProtocolEncoder
from cdc_codecs.simple import SimpleDecoder, SimpleEncoder

# The version of every decoder's output. Bump it when any decoder decodes differently (a fix,
# a new field): the pipeline keeps its decoded change log per ``<protocol>-<DECODER_VERSION>``,
# so a bump makes it decode the raw archive again instead of trusting the old output.
DECODER_VERSION = "4"  # 4: a BINARY(n) value padded with 0x00 to n bytes, as MySQL holds it


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    decoder: type[Decoder]
    encoder: type[Encoder]
    has_commit_ts: bool
    description: str
    encoder_defaults: tuple[tuple[str, Any], ...] = ()
    # Every change carries binlog coordinates that grow along each partition's offsets (the
    # connector reads one binlog in order and its producer keeps order), so a change at or
    # below the greatest coordinates its partition showed is a redelivery after a restart.
    binlog_ordered: bool = False
    # The one partition whose DDL a run applies, where the producer sends DDL there (TiCDC's
    # Canal-JSON: partition 0; a copy seen elsewhere is ignored); None: DDL of every partition,
    # broadcast copies applied once.
    ddl_partition: int | None = None
    # Every after image holds every column of its table. False where the upstream may leave out
    # the columns a statement did not change (Alibaba Canal passes on what MySQL's binlog holds:
    # with binlog_row_image NOBLOB or MINIMAL, an UPDATE's after image lacks them). TiCDC sends
    # whole rows; Debezium and DTS require binlog_row_image FULL. A column a row then lacks was
    # filtered out upstream (Debezium's column.exclude.list, TiCDC's column selectors, Canal's
    # canal.instance.filter.field): PipelineConfig.holds_omitted_columns.
    whole_rows: bool = True

    def carries_commit_ts(self, options: Mapping[str, Any] | None = None) -> bool:
        """Whether a topic of this protocol, read with these decoder options, is ordered by its
        commitTs; otherwise by the derived clock (README, "Derived watermarks"). TiCDC's
        Canal-JSON carries one only with the changefeed's enable-tidb-extension=true, which
        the topic's option ``enable_tidb_extension`` states (default true)."""
        return self.has_commit_ts and self.decoder(**dict(options or {})).carries_commit_ts


PROTOCOLS: dict[str, ProtocolSpec] = {
    spec.name: spec
    for spec in (
        ProtocolSpec("canal-json", CanalJsonDecoder, CanalJsonEncoder, True,
                     "TiCDC Canal-JSON (option enable_tidb_extension=false: without _tidb, in derived order)",
                     ddl_partition=0),
        ProtocolSpec("canal", CanalFlatDecoder, CanalFlatEncoder, False, "Alibaba Canal flat message JSON", whole_rows=False),
        ProtocolSpec("cloudcanal-canal-json", CanalFlatDecoder, CanalFlatEncoder, False, "CloudCanal's Canal JSON (tableChanges on DDL)"),
        ProtocolSpec("open-protocol", OpenProtocolDecoder, OpenProtocolEncoder, True, "TiCDC Open Protocol (binary-framed batches)"),
        ProtocolSpec("debezium", DebeziumDecoder, DebeziumEncoder, True, "TiCDC Debezium (commit_ts, watermarks)"),
        ProtocolSpec("debezium-mysql", DebeziumDecoder, DebeziumEncoder, False, "Debezium MySQL connector envelopes", (("flavor", "mysql"),),
                     binlog_ordered=True),
        ProtocolSpec("cloudcanal-debezium", DebeziumDecoder, DebeziumEncoder, False, "CloudCanal's Debezium Envelope", (("flavor", "mysql"),)),
        ProtocolSpec("simple", SimpleDecoder, SimpleEncoder, True, "TiCDC Simple protocol (option encoding=json|avro)"),
        ProtocolSpec("cloudcanal-json", CloudCanalJsonDecoder, CloudCanalJsonEncoder, False, "CloudCanal JSON"),
        ProtocolSpec("dts-avro", DtsAvroDecoder, DtsAvroEncoder, False, "Aliyun DTS Avro (schema versions 1 and 2)",
                     binlog_ordered=True),
    )
}


def protocol_spec(name: str) -> ProtocolSpec:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ConfigError(f"unknown protocol {name!r}; known protocols: {', '.join(sorted(PROTOCOLS))}") from None


def get_decoder(protocol: str, **options: Any) -> Decoder:
    """A new decoder for one partition's stream of ``protocol``.

    Raises:
        ConfigError: unknown protocol or option, or an option value that does not parse.
    """
    spec = protocol_spec(protocol)
    decoder = spec.decoder(**options)
    decoder.protocol = spec.name  # errors name the protocol the user configured
    return decoder


def get_encoder(protocol: str, **options: Any) -> Encoder:
    spec = protocol_spec(protocol)
    encoder = spec.encoder(**{**dict(spec.encoder_defaults), **options})
    encoder.protocol = spec.name
    return encoder
