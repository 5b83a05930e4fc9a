from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_UNSPECIFIED: _ClassVar[Type]
    TYPE_INT: _ClassVar[Type]
    TYPE_FLOAT: _ClassVar[Type]
    TYPE_STRING: _ClassVar[Type]
TYPE_UNSPECIFIED: Type
TYPE_INT: Type
TYPE_FLOAT: Type
TYPE_STRING: Type

class BackupRequest(_message.Message):
    __slots__ = ("directory",)
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    directory: str
    def __init__(self, directory: _Optional[str] = ...) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ("directory", "lsn", "bytes", "seconds")
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    directory: str
    lsn: int
    bytes: int
    seconds: float
    def __init__(self, directory: _Optional[str] = ..., lsn: _Optional[int] = ..., bytes: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("int_value", "float_value", "string_value")
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    int_value: int
    float_value: float
    string_value: str
    def __init__(self, int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., string_value: _Optional[str] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name", "int64_le", "float64_le", "strings", "null_rows")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INT64_LE_FIELD_NUMBER: _ClassVar[int]
    FLOAT64_LE_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    NULL_ROWS_FIELD_NUMBER: _ClassVar[int]
    name: str
    int64_le: bytes
    float64_le: bytes
    strings: Strings
    null_rows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., int64_le: _Optional[bytes] = ..., float64_le: _Optional[bytes] = ..., strings: _Optional[_Union[Strings, _Mapping]] = ..., null_rows: _Optional[_Iterable[int]] = ...) -> None: ...

class Strings(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: Type
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[Type, str]] = ...) -> None: ...

class CreateStreamRequest(_message.Message):
    __slots__ = ("name", "attributes", "time", "max_window", "partition_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_WINDOW_FIELD_NUMBER: _ClassVar[int]
    PARTITION_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    time: str
    max_window: float
    partition_by: str
    def __init__(self, name: _Optional[str] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., time: _Optional[str] = ..., max_window: _Optional[float] = ..., partition_by: _Optional[str] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("name", "attributes", "time", "max_window", "tuples_stored", "tuples_ingested", "queries", "last_ts", "owner", "grants", "partition_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_WINDOW_FIELD_NUMBER: _ClassVar[int]
    TUPLES_STORED_FIELD_NUMBER: _ClassVar[int]
    TUPLES_INGESTED_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    LAST_TS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    time: str
    max_window: float
    tuples_stored: int
    tuples_ingested: int
    queries: int
    last_ts: Value
    owner: str
    grants: _containers.RepeatedCompositeFieldContainer[StreamGrant]
    partition_by: str
    def __init__(self, name: _Optional[str] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., time: _Optional[str] = ..., max_window: _Optional[float] = ..., tuples_stored: _Optional[int] = ..., tuples_ingested: _Optional[int] = ..., queries: _Optional[int] = ..., last_ts: _Optional[_Union[Value, _Mapping]] = ..., owner: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[StreamGrant, _Mapping]]] = ..., partition_by: _Optional[str] = ...) -> None: ...

class StreamGrant(_message.Message):
    __slots__ = ("client", "rights")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    RIGHTS_FIELD_NUMBER: _ClassVar[int]
    client: str
    rights: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client: _Optional[str] = ..., rights: _Optional[_Iterable[str]] = ...) -> None: ...

class GrantRequest(_message.Message):
    __slots__ = ("stream", "client", "right")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    client: str
    right: str
    def __init__(self, stream: _Optional[str] = ..., client: _Optional[str] = ..., right: _Optional[str] = ...) -> None: ...

class DescribeStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListStreamsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListStreamsResponse(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ...) -> None: ...

class DropStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DropStreamResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IngestRequest(_message.Message):
    __slots__ = ("stream", "columns", "batch_id")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    stream: str
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    batch_id: int
    def __init__(self, stream: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., batch_id: _Optional[int] = ...) -> None: ...

class IngestAck(_message.Message):
    __slots__ = ("batch_id", "rows", "first_tuple_id", "last_tuple_id", "matches")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TUPLE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_TUPLE_ID_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    rows: int
    first_tuple_id: int
    last_tuple_id: int
    matches: int
    def __init__(self, batch_id: _Optional[int] = ..., rows: _Optional[int] = ..., first_tuple_id: _Optional[int] = ..., last_tuple_id: _Optional[int] = ..., matches: _Optional[int] = ...) -> None: ...

class PrepareQueryRequest(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class PrepareQueryResponse(_message.Message):
    __slots__ = ("template_id", "params", "streams")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    params: _containers.RepeatedScalarFieldContainer[str]
    streams: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, template_id: _Optional[str] = ..., params: _Optional[_Iterable[str]] = ..., streams: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterQueryRequest(_message.Message):
    __slots__ = ("text", "params", "invoke", "now", "template_id")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    INVOKE_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    params: _containers.MessageMap[str, Value]
    invoke: bool
    now: float
    template_id: str
    def __init__(self, text: _Optional[str] = ..., params: _Optional[_Mapping[str, Value]] = ..., invoke: _Optional[bool] = ..., now: _Optional[float] = ..., template_id: _Optional[str] = ...) -> None: ...

class ColumnInfo(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: Type
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[Type, str]] = ...) -> None: ...

class Window(_message.Message):
    __slots__ = ("begin", "end")
    class Bound(_message.Message):
        __slots__ = ("relative_to_now", "offset")
        RELATIVE_TO_NOW_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        relative_to_now: bool
        offset: float
        def __init__(self, relative_to_now: _Optional[bool] = ..., offset: _Optional[float] = ...) -> None: ...
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    begin: Window.Bound
    end: Window.Bound
    def __init__(self, begin: _Optional[_Union[Window.Bound, _Mapping]] = ..., end: _Optional[_Union[Window.Bound, _Mapping]] = ...) -> None: ...

class RegisterQueryResponse(_message.Message):
    __slots__ = ("handle", "columns", "window", "streams", "current", "current_omitted")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_OMITTED_FIELD_NUMBER: _ClassVar[int]
    handle: str
    columns: _containers.RepeatedCompositeFieldContainer[ColumnInfo]
    window: Window
    streams: _containers.RepeatedScalarFieldContainer[str]
    current: InvokeQueryResponse
    current_omitted: bool
    def __init__(self, handle: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[ColumnInfo, _Mapping]]] = ..., window: _Optional[_Union[Window, _Mapping]] = ..., streams: _Optional[_Iterable[str]] = ..., current: _Optional[_Union[InvokeQueryResponse, _Mapping]] = ..., current_omitted: _Optional[bool] = ...) -> None: ...

class InvokeRequest(_message.Message):
    __slots__ = ("handle", "now")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    handle: str
    now: float
    def __init__(self, handle: _Optional[str] = ..., now: _Optional[float] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("items",)
    class Item(_message.Message):
        __slots__ = ("register", "invoke")
        REGISTER_FIELD_NUMBER: _ClassVar[int]
        INVOKE_FIELD_NUMBER: _ClassVar[int]
        register: RegisterQueryRequest
        invoke: InvokeRequest
        def __init__(self, register: _Optional[_Union[RegisterQueryRequest, _Mapping]] = ..., invoke: _Optional[_Union[InvokeRequest, _Mapping]] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[BatchRequest.Item]
    def __init__(self, items: _Optional[_Iterable[_Union[BatchRequest.Item, _Mapping]]] = ...) -> None: ...

class InvokesReply(_message.Message):
    __slots__ = ("result", "refused")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    result: InvokeQueryResponse
    refused: Refusal
    def __init__(self, result: _Optional[_Union[InvokeQueryResponse, _Mapping]] = ..., refused: _Optional[_Union[Refusal, _Mapping]] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("replies",)
    class Reply(_message.Message):
        __slots__ = ("register", "invoke")
        REGISTER_FIELD_NUMBER: _ClassVar[int]
        INVOKE_FIELD_NUMBER: _ClassVar[int]
        register: RegisterQueryResponse
        invoke: InvokeQueryResponse
        def __init__(self, register: _Optional[_Union[RegisterQueryResponse, _Mapping]] = ..., invoke: _Optional[_Union[InvokeQueryResponse, _Mapping]] = ...) -> None: ...
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[BatchResponse.Reply]
    def __init__(self, replies: _Optional[_Iterable[_Union[BatchResponse.Reply, _Mapping]]] = ...) -> None: ...

class InvokeQueryRequest(_message.Message):
    __slots__ = ("handle", "now", "page_rows")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    PAGE_ROWS_FIELD_NUMBER: _ClassVar[int]
    handle: str
    now: float
    page_rows: int
    def __init__(self, handle: _Optional[str] = ..., now: _Optional[float] = ..., page_rows: _Optional[int] = ...) -> None: ...

class InvokeQueryResponse(_message.Message):
    __slots__ = ("columns", "data", "rows", "now", "window_begin", "window_end", "total_rows")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    WINDOW_BEGIN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[ColumnInfo]
    data: _containers.RepeatedCompositeFieldContainer[Column]
    rows: int
    now: Value
    window_begin: Value
    window_end: Value
    total_rows: int
    def __init__(self, columns: _Optional[_Iterable[_Union[ColumnInfo, _Mapping]]] = ..., data: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., rows: _Optional[int] = ..., now: _Optional[_Union[Value, _Mapping]] = ..., window_begin: _Optional[_Union[Value, _Mapping]] = ..., window_end: _Optional[_Union[Value, _Mapping]] = ..., total_rows: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("handle", "include_current")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CURRENT_FIELD_NUMBER: _ClassVar[int]
    handle: str
    include_current: bool
    def __init__(self, handle: _Optional[str] = ..., include_current: _Optional[bool] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("kind", "columns", "data", "rows", "first_tuple_id", "now", "window_begin", "window_end")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[SubscribeResponse.Kind]
        CURRENT: _ClassVar[SubscribeResponse.Kind]
        NEW: _ClassVar[SubscribeResponse.Kind]
    KIND_UNSPECIFIED: SubscribeResponse.Kind
    CURRENT: SubscribeResponse.Kind
    NEW: SubscribeResponse.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TUPLE_ID_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    WINDOW_BEGIN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    kind: SubscribeResponse.Kind
    columns: _containers.RepeatedCompositeFieldContainer[ColumnInfo]
    data: _containers.RepeatedCompositeFieldContainer[Column]
    rows: int
    first_tuple_id: int
    now: Value
    window_begin: Value
    window_end: Value
    def __init__(self, kind: _Optional[_Union[SubscribeResponse.Kind, str]] = ..., columns: _Optional[_Iterable[_Union[ColumnInfo, _Mapping]]] = ..., data: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., rows: _Optional[int] = ..., first_tuple_id: _Optional[int] = ..., now: _Optional[_Union[Value, _Mapping]] = ..., window_begin: _Optional[_Union[Value, _Mapping]] = ..., window_end: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class UnregisterQueryRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: str
    def __init__(self, handle: _Optional[str] = ...) -> None: ...

class UnregisterQueryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeQueryRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: str
    def __init__(self, handle: _Optional[str] = ...) -> None: ...

class QueryInfo(_message.Message):
    __slots__ = ("handle", "text", "params", "columns", "window", "streams", "registered_at", "invocations")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    INVOCATIONS_FIELD_NUMBER: _ClassVar[int]
    handle: str
    text: str
    params: _containers.MessageMap[str, Value]
    columns: _containers.RepeatedCompositeFieldContainer[ColumnInfo]
    window: Window
    streams: _containers.RepeatedScalarFieldContainer[str]
    registered_at: float
    invocations: int
    def __init__(self, handle: _Optional[str] = ..., text: _Optional[str] = ..., params: _Optional[_Mapping[str, Value]] = ..., columns: _Optional[_Iterable[_Union[ColumnInfo, _Mapping]]] = ..., window: _Optional[_Union[Window, _Mapping]] = ..., streams: _Optional[_Iterable[str]] = ..., registered_at: _Optional[float] = ..., invocations: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("busiest_queries",)
    BUSIEST_QUERIES_FIELD_NUMBER: _ClassVar[int]
    busiest_queries: bool
    def __init__(self, busiest_queries: _Optional[bool] = ...) -> None: ...

class StreamStats(_message.Message):
    __slots__ = ("name", "tuples_stored", "tuples_ingested", "bytes", "indexed_blocks", "query_entries")
    class IndexedBlocksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TUPLES_STORED_FIELD_NUMBER: _ClassVar[int]
    TUPLES_INGESTED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    INDEXED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    QUERY_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    tuples_stored: int
    tuples_ingested: int
    bytes: int
    indexed_blocks: _containers.ScalarMap[str, int]
    query_entries: int
    def __init__(self, name: _Optional[str] = ..., tuples_stored: _Optional[int] = ..., tuples_ingested: _Optional[int] = ..., bytes: _Optional[int] = ..., indexed_blocks: _Optional[_Mapping[str, int]] = ..., query_entries: _Optional[int] = ...) -> None: ...

class LatencyPercentiles(_message.Message):
    __slots__ = ("p50_ms", "p90_ms", "p99_ms", "count")
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P90_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    p50_ms: float
    p90_ms: float
    p99_ms: float
    count: int
    def __init__(self, p50_ms: _Optional[float] = ..., p90_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("strategy", "queries", "matches_marked", "ingest_rate", "invoke_latency", "queue_depth", "memory_bytes", "streams", "subscriptions", "busiest_queries", "shards", "invoke_calls")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    MATCHES_MARKED_FIELD_NUMBER: _ClassVar[int]
    INGEST_RATE_FIELD_NUMBER: _ClassVar[int]
    INVOKE_LATENCY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    BUSIEST_QUERIES_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    INVOKE_CALLS_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    queries: int
    matches_marked: int
    ingest_rate: float
    invoke_latency: LatencyPercentiles
    queue_depth: int
    memory_bytes: int
    streams: _containers.RepeatedCompositeFieldContainer[StreamStats]
    subscriptions: int
    busiest_queries: _containers.RepeatedCompositeFieldContainer[QueryStats]
    shards: _containers.RepeatedCompositeFieldContainer[ShardStats]
    invoke_calls: int
    def __init__(self, strategy: _Optional[str] = ..., queries: _Optional[int] = ..., matches_marked: _Optional[int] = ..., ingest_rate: _Optional[float] = ..., invoke_latency: _Optional[_Union[LatencyPercentiles, _Mapping]] = ..., queue_depth: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., streams: _Optional[_Iterable[_Union[StreamStats, _Mapping]]] = ..., subscriptions: _Optional[int] = ..., busiest_queries: _Optional[_Iterable[_Union[QueryStats, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardStats, _Mapping]]] = ..., invoke_calls: _Optional[int] = ...) -> None: ...

class ShardStats(_message.Message):
    __slots__ = ("index", "state", "node", "pid", "tuples_stored", "queries", "memory_bytes", "restarts", "last_op")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TUPLES_STORED_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LAST_OP_FIELD_NUMBER: _ClassVar[int]
    index: int
    state: str
    node: str
    pid: int
    tuples_stored: int
    queries: int
    memory_bytes: int
    restarts: int
    last_op: int
    def __init__(self, index: _Optional[int] = ..., state: _Optional[str] = ..., node: _Optional[str] = ..., pid: _Optional[int] = ..., tuples_stored: _Optional[int] = ..., queries: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., restarts: _Optional[int] = ..., last_op: _Optional[int] = ...) -> None: ...

class QueryStats(_message.Message):
    __slots__ = ("handle", "text", "invocations", "owner")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INVOCATIONS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    handle: str
    text: str
    invocations: int
    owner: str
    def __init__(self, handle: _Optional[str] = ..., text: _Optional[str] = ..., invocations: _Optional[int] = ..., owner: _Optional[str] = ...) -> None: ...

class BeginLoadRequest(_message.Message):
    __slots__ = ("stream",)
    STREAM_FIELD_NUMBER: _ClassVar[int]
    stream: str
    def __init__(self, stream: _Optional[str] = ...) -> None: ...

class BeginLoadResponse(_message.Message):
    __slots__ = ("load_id",)
    LOAD_ID_FIELD_NUMBER: _ClassVar[int]
    load_id: str
    def __init__(self, load_id: _Optional[str] = ...) -> None: ...

class LoadBatchRequest(_message.Message):
    __slots__ = ("load_id", "columns", "batch_id", "part")
    LOAD_ID_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    load_id: str
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    batch_id: int
    part: str
    def __init__(self, load_id: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., batch_id: _Optional[int] = ..., part: _Optional[str] = ...) -> None: ...

class LoadBatchesResponse(_message.Message):
    __slots__ = ("batches", "rows", "replaced")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    batches: int
    rows: int
    replaced: bool
    def __init__(self, batches: _Optional[int] = ..., rows: _Optional[int] = ..., replaced: _Optional[bool] = ...) -> None: ...

class CommitLoadRequest(_message.Message):
    __slots__ = ("load_id",)
    LOAD_ID_FIELD_NUMBER: _ClassVar[int]
    load_id: str
    def __init__(self, load_id: _Optional[str] = ...) -> None: ...

class CommitLoadResponse(_message.Message):
    __slots__ = ("rows", "first_tuple_id", "last_tuple_id")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TUPLE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_TUPLE_ID_FIELD_NUMBER: _ClassVar[int]
    rows: int
    first_tuple_id: int
    last_tuple_id: int
    def __init__(self, rows: _Optional[int] = ..., first_tuple_id: _Optional[int] = ..., last_tuple_id: _Optional[int] = ...) -> None: ...

class AbortLoadRequest(_message.Message):
    __slots__ = ("load_id",)
    LOAD_ID_FIELD_NUMBER: _ClassVar[int]
    load_id: str
    def __init__(self, load_id: _Optional[str] = ...) -> None: ...

class AbortLoadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadStreamRequest(_message.Message):
    __slots__ = ("stream", "part", "parts", "page_rows")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    PAGE_ROWS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    part: int
    parts: int
    page_rows: int
    def __init__(self, stream: _Optional[str] = ..., part: _Optional[int] = ..., parts: _Optional[int] = ..., page_rows: _Optional[int] = ...) -> None: ...

class ReadStreamResponse(_message.Message):
    __slots__ = ("columns", "rows")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    rows: int
    def __init__(self, columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., rows: _Optional[int] = ...) -> None: ...
