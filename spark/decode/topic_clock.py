"""Which clock orders a topic whose protocol leaves it to the changefeed: settled once, from the archive.

TiCDC's Canal-JSON carries a commitTs (``_tidb``) only when the changefeed has
``enable-tidb-extension=true``; its default sends none, and the topic is then ordered by the
derived clock (docs/consistency.md, "Derived watermarks"). A topic left at the decoder option's default,
``auto``, takes the mode its first archived message shows, and keeps it for its whole life:
one clock per topic, whatever later messages say (a message of the other kind is then a bad
message naming the settings, as with the option set by hand). The decision is a documented
record in the archive, created once:

    <pipeline>/topics/<encoded topic>.json   {"format": 1, "enable_tidb_extension": bool,
                                              "decided_from": "<topic>/<partition>@<offset>"}

so every run, retry, backfill and repair orders the topic the same way. Before the topic's
first message is archived there is nothing to decode and nothing is recorded.
"""

from __future__ import annotations

import dataclasses

import orjson

from cdc_codecs.canal_json import AUTO, TIDB_EXTENSION_OPTION
from cdc_codecs.registry import protocol_spec
from spark.archive import layout
from spark.config import PipelineConfig, TopicConfig
from spark.archive.manifest import list_manifests, read_manifest, segment_batches
from spark.archive.storage import AlreadyExists, Storage

FORMAT = 1
# Messages looked at, at most, for one that says either way (a topic may start with others' noise).
_PEEK = 1000


def topic_clock_path(pipeline: str, topic: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/topics/{layout.encode_name(topic)}.json"


def settle_topic_clocks(config: PipelineConfig, storage: Storage, *, record: bool = True) -> PipelineConfig:
    """``config`` with every ``auto`` topic's mode settled (recorded in the archive, or decided now
    from the topic's first archived message and recorded); topics without an archived message
    keep ``auto`` (nothing of theirs is decoded yet). ``record=False`` (a reader without the
    pipeline's lease: the change feed) decides an unrecorded one the same way without recording it."""
    topics = []
    for topic in config.topics:
        options = _settled(config, storage, topic, record)
        topics.append(topic if options is None else dataclasses.replace(topic, options={**topic.options, **options}))
    return dataclasses.replace(config, topics=tuple(topics)) if tuple(topics) != config.topics else config


def _settled(config: PipelineConfig, storage: Storage, topic: TopicConfig, record: bool) -> dict[str, bool] | None:
    option = protocol_spec(topic.protocol).decoder.options_spec.get(TIDB_EXTENSION_OPTION)
    if option is None or option.parse(topic.options.get(TIDB_EXTENSION_OPTION, AUTO)) != AUTO:
        return None
    path = topic_clock_path(config.name, topic.name)
    if not storage.exists(path):
        decided = _first_message_says(storage, config, topic.name)
        if decided is None:
            return None
        extension, where = decided
        if not record:  # from the first message, as the run that records it will decide
            return {TIDB_EXTENSION_OPTION: extension}
        try:
            storage.create(path, orjson.dumps({"format": FORMAT, TIDB_EXTENSION_OPTION: extension, "decided_from": where},
                                              option=orjson.OPT_INDENT_2))
        except AlreadyExists:
            pass  # another run decided first: from the same first message, the same way
    doc = orjson.loads(storage.read(path))
    return {TIDB_EXTENSION_OPTION: bool(doc[TIDB_EXTENSION_OPTION])}


def _first_message_says(storage: Storage, config: PipelineConfig, topic: str) -> tuple[bool, str] | None:
    """(whether the topic's first archived Canal-JSON document carries ``_tidb``, where it lies)."""
    for _, _, path in list_manifests(storage, config.name):
        segments = [(p.partition, s) for p in read_manifest(storage, path).partitions if p.topic == topic for s in p.segments]
        for partition, segment in sorted(segments, key=lambda x: (x[1].start, x[0])):
            seen = 0
            for batch in segment_batches(storage, segment.path, ["offset", "value"], _PEEK):
                for offset, value in zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist()):
                    seen += 1
                    doc = _document(value)
                    if doc is not None:
                        return isinstance(doc.get("_tidb"), dict), f"{topic}/{partition}@{offset}"
                    if seen >= _PEEK:
                        break
                if seen >= _PEEK:
                    break
    return None


def _document(value: bytes | None) -> dict | None:
    """The first Canal-JSON document of a message, or None for anything else (undecodable bytes
    are the decoder's to quarantine)."""
    if not value:
        return None
    try:
        doc = orjson.loads(value.split(b"\n", 1)[0] if b"\n" in value.strip() else value)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("type"), str) else None
