import CRdKafka
public import Logging
public import ServiceLifecycle

/// A Kafka producer whose `send` returns only once the broker acknowledged the record.
///
/// Delivery reports arrive on librdkafka's background thread, so no Swift thread polls.
/// `run()` waits for graceful shutdown and then flushes what is still in flight.
public final class KafkaProducer: Service, Sendable {
    private let client: RDKafkaClient
    private let flushTimeout: Duration

    public init(configuration: KafkaConfiguration, flushTimeout: Duration = .seconds(10), logger: Logger) throws {
        self.client = try RDKafkaClient(
            kind: .producer,
            configuration: configuration,
            properties: ["acks": "all", "linger.ms": "2"],
            logger: logger
        )
        self.flushTimeout = flushTimeout
    }

    /// Produces `message` once and waits for its delivery report, however long librdkafka
    /// retries (bounded by `message.timeout.ms`); throws if the broker refused it or librdkafka
    /// gave up. A ``KafkaError`` says whether sending it again can help (``KafkaError/isRetriable``).
    /// Only a record librdkafka did not take (its local queue was full) is handed over again.
    public func send(_ message: KafkaOutgoingMessage) async throws {
        while true {
            do {
                return try await withCheckedThrowingContinuation { continuation in
                    do {
                        try enqueue(message, report: DeliveryReport(continuation))
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            } catch let error as KafkaError where error.isQueueFull {
                // librdkafka's local queue is full: give it time to drain instead of failing.
                try await Task.sleep(for: .milliseconds(5))
            }
        }
    }

    /// Hands the record to librdkafka (a non-blocking call); the report owns `report` from here.
    private func enqueue(_ message: KafkaOutgoingMessage, report: DeliveryReport) throws {
        try client.immediate { handle in
            var headers: OpaquePointer?
            if !message.headers.isEmpty {
                headers = rd_kafka_headers_new(message.headers.count)
                for header in message.headers {
                    if let value = header.value {
                        value.withUnsafeBytes { bytes in
                            _ = rd_kafka_header_add(headers, header.key, -1, bytes.baseAddress, bytes.count)
                        }
                    } else {
                        _ = rd_kafka_header_add(headers, header.key, -1, nil, 0)
                    }
                }
            }
            let opaque = Unmanaged.passRetained(report)
            let error = withOptionalBytes(message.key) { key in
                withOptionalBytes(message.value) { value in
                    herald_produce(
                        handle,
                        message.topic,
                        key.baseAddress,
                        key.count,
                        value.baseAddress,
                        value.count,
                        headers,
                        opaque.toOpaque()
                    )
                }
            }
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                opaque.release()
                if let headers { rd_kafka_headers_destroy(headers) }
                if error == RD_KAFKA_RESP_ERR__QUEUE_FULL { throw KafkaError.queueFull() }
                throw KafkaError.produce(ProduceErrorCause(error))
            }
        }
    }

    /// Waits for graceful shutdown or cancellation, then flushes in-flight records and closes.
    public func run() async throws {
        try? await gracefulShutdown()
        let timeoutMilliseconds = Int32(flushTimeout.components.seconds * 1000)
        await client.destroy { handle in
            _ = rd_kafka_flush(handle, timeoutMilliseconds)
        }
    }
}

/// Passes the bytes of an optional array (nil as a null pointer) to `body`.
private func withOptionalBytes<Result>(
    _ bytes: [UInt8]?,
    _ body: (UnsafeRawBufferPointer) -> Result
) -> Result {
    guard let bytes else { return body(UnsafeRawBufferPointer(start: nil, count: 0)) }
    return bytes.withUnsafeBytes(body)
}
