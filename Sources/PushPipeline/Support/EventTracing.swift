import KafkaMessages
public import Logging
public import Tracing

/// The trace of one push.requests event: its span, continuing the W3C `traceparent` (and
/// `tracestate`) the message carried, and the headers that carry the span's context on to the
/// event's push.results and push.unregistered records.
struct EventTrace: Sendable {
    let span: any Span
    let headers: [KafkaHeader]

    /// Starts the event's span as a child of the context in `message`'s headers (a malformed or
    /// missing `traceparent` starts a new trace).
    init(tracer: any Tracer, message: KafkaMessage, eventID: String, users: Int) {
        var context = ServiceContext.topLevel
        tracer.extract(message.headers, into: &context, using: KafkaHeaderCarrier())
        let span = tracer.startSpan("herald.event", context: context, ofKind: .consumer)
        span.attributes["herald.event_id"] = eventID
        span.attributes["herald.users"] = users
        span.attributes["messaging.kafka.partition"] = Int(message.partition)
        span.attributes["messaging.kafka.offset"] = Int(message.offset)
        var headers: [KafkaHeader] = []
        tracer.inject(span.context, into: &headers, using: KafkaHeaderCarrier())
        self.span = span
        self.headers = headers
    }

    /// Starts the span of one device's send, a child of the event's.
    func startSend(tracer: any Tracer) -> any Span {
        tracer.startSpan("herald.send", context: span.context, ofKind: .client)
    }
}

/// Reads and writes trace-context headers of Kafka records.
struct KafkaHeaderCarrier: Extractor, Injector {
    func extract(key: String, from carrier: [KafkaHeader]) -> String? {
        guard let header = carrier.last(where: { $0.key.lowercased() == key }), let value = header.value else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    func inject(_ value: String, forKey key: String, into carrier: inout [KafkaHeader]) {
        carrier.append(KafkaHeader(key: key, text: value))
    }
}

extension ServiceContext {
    /// The push.requests event the current work is for.
    public var heraldEventID: String? {
        get { self[HeraldEventIDKey.self] }
        set { self[HeraldEventIDKey.self] = newValue }
    }
}

private enum HeraldEventIDKey: ServiceContextKey {
    typealias Value = String
}

extension Logger.MetadataProvider {
    /// Adds `push.event_id` to every line logged while ``ServiceContext/heraldEventID`` is set,
    /// so each line about an event names it (with swift-otel's provider beside it, the trace too).
    public static let heraldEvent = Logger.MetadataProvider {
        guard let eventID = ServiceContext.current?.heraldEventID else { return [:] }
        return [PipelineLoggingKeys.eventID: "\(eventID)"]
    }
}

/// The W3C trace-context headers of a record, passed on unchanged when Herald makes no span.
enum TraceContextHeaders {
    /// `traceparent` and its `tracestate` from `headers`, when the `traceparent` is well formed
    /// (version `00`, a 32-hex trace id and a 16-hex parent id, neither all zeros, 2-hex flags);
    /// none otherwise, as a malformed `traceparent` is ignored.
    static func propagated(from headers: [KafkaHeader]) -> [KafkaHeader] {
        guard let parent = headers.last(where: { $0.key == "traceparent" }), let value = parent.value, isWellFormed(value) else {
            return []
        }
        return [parent] + headers.filter { $0.key == "tracestate" }.suffix(1)
    }

    private static func isWellFormed(_ value: [UInt8]) -> Bool {
        guard value.count == 55, value[2] == UInt8(ascii: "-"), value[35] == UInt8(ascii: "-"), value[52] == UInt8(ascii: "-") else {
            return false
        }
        func isHex(_ range: Range<Int>) -> Bool {
            value[range].allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
        }
        func isZero(_ range: Range<Int>) -> Bool { value[range].allSatisfy { $0 == UInt8(ascii: "0") } }
        return value[0..<2] == [UInt8(ascii: "0"), UInt8(ascii: "0")] && isHex(3..<35) && isHex(36..<52) && isHex(53..<55)
            && !isZero(3..<35) && !isZero(36..<52)
    }
}
