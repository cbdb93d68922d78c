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
