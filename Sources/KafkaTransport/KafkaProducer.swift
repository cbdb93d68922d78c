import PushCore
import CRdKafka
package import KafkaMessages
package import Logging
import ServiceLifecycle
import Synchronization

/// A Kafka producer whose `send` returns only once the broker acknowledged the record.
///
/// Delivery reports arrive on librdkafka's background thread, so no Swift thread polls.
/// `run()` waits for graceful shutdown and then flushes what is still in flight.
package final class KafkaProducer: Service, Sendable {
    private let client: RDKafkaClient
    private let flushTimeout: Duration

    package init(configuration: KafkaConfiguration, flushTimeout: Duration = .seconds(10), logger: Logger) throws {
        self.client = try RDKafkaClient(
            kind: .producer,
            configuration: configuration,
            properties: ["acks": "all", "linger.ms": "2"],
            logger: logger
        )
        self.flushTimeout = flushTimeout
    }

    /// Records handed to librdkafka and not yet acknowledged (its out-queue, which also holds
    /// protocol requests in flight). A non-blocking read.
    package var queuedRecords: Int {
        (try? client.immediate { Int(rd_kafka_outq_len($0)) }) ?? 0
    }

    /// The bootstrap servers of the mock cluster librdkafka made for this producer
    /// (`test.mock.num.brokers`), so tests can run consumers against it; nil for a real cluster.
    package var mockClusterBootstrapServers: String? {
        try? client.immediate { handle -> String? in
            guard let cluster = rd_kafka_handle_mock_cluster(handle), let servers = rd_kafka_mock_cluster_bootstraps(cluster) else {
                return nil
            }
            return String(cString: servers)
        }
    }

    /// Creates `topic` with `partitions` on this producer's mock cluster (for tests).
    package func createMockTopic(_ topic: String, partitions: Int) throws {
        try client.immediate { handle in
            guard let cluster = rd_kafka_handle_mock_cluster(handle) else { throw KafkaError.subscription("no mock cluster") }
            let error = rd_kafka_mock_topic_create(cluster, topic, Int32(partitions), 1)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.subscription(String(cString: rd_kafka_err2str(error))) }
        }
    }

    /// Produces `message` once and waits for its delivery report, however long librdkafka
    /// retries (bounded by `message.timeout.ms`); throws if the broker refused it or librdkafka
    /// gave up. A ``KafkaError`` says whether sending it again can help (``KafkaError/isRetriable``).
    /// Only a record librdkafka did not take (its local queue was full) is handed over again.
    package func send(_ message: KafkaOutgoingMessage) async throws {
        if let error = await send([message])[0] { throw error }
    }

    /// The wait before handing a record over again while librdkafka's local queue is full.
    static let queueFullPause = Duration.milliseconds(5)

    /// Produces every message once and waits for all their delivery reports together; returns,
    /// in order, nil for each record the broker acknowledged and the error of each it did not.
    ///
    /// One wait for the batch instead of one per record: each `send` resumes its caller from
    /// librdkafka's thread, a job and often a thread wake-up per record (BENCHMARKS.md).
    package func send(_ messages: [KafkaOutgoingMessage]) async -> [(any Error)?] {
        guard !messages.isEmpty else { return [] }
        let batch = ProduceBatch(count: messages.count)
        for (index, message) in messages.enumerated() {
            while true {
                do {
                    try enqueue(message, report: ProduceAcknowledgement(batch, index: index))
                    break
                } catch let error as KafkaError where error.isQueueFull {
                    // librdkafka's local queue is full: it drains as the broker acknowledges, so
                    // wait a little instead of failing (a cancelled wait reports the full queue).
                    do {
                        try await Task.sleep(for: Self.queueFullPause)
                    } catch {
                        batch.deliver(KafkaError.queueFull(), at: index)
                        break
                    }
                } catch {
                    batch.deliver(error, at: index)
                    break
                }
            }
        }
        return await batch.reports()
    }

    /// Hands the record to librdkafka (a non-blocking call); the report owns `report` from here.
    private func enqueue(_ message: KafkaOutgoingMessage, report: ProduceAcknowledgement) throws {
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
    package func run() async throws {
        try? await gracefulShutdown()
        let timeoutMilliseconds = Int32(clamping: flushTimeout.wholeMilliseconds)
        await client.destroy { handle in
            _ = rd_kafka_flush(handle, timeoutMilliseconds)
        }
    }
}

/// The delivery reports of one ``KafkaProducer/send(_:)-([KafkaOutgoingMessage])`` batch: counts
/// them down on librdkafka's thread and resumes the batch's one waiter after the last.
final class ProduceBatch: Sendable {
    private struct State {
        var outstanding: Int
        var errors: [(any Error)?]
        var waiter: CheckedContinuation<[(any Error)?], Never>?
    }

    private let state: Mutex<State>

    init(count: Int) {
        state = Mutex(State(outstanding: count, errors: Array(repeating: nil, count: count)))
    }

    /// Records the report of the record at `index` (nil: acknowledged).
    func deliver(_ error: (any Error)?, at index: Int) {
        let finished = state.withLock { state -> (CheckedContinuation<[(any Error)?], Never>, [(any Error)?])? in
            state.errors[index] = error
            state.outstanding -= 1
            guard state.outstanding == 0, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return (waiter, state.errors)
        }
        if let (waiter, errors) = finished { waiter.resume(returning: errors) }
    }

    /// Waits until every record has its report.
    func reports() async -> [(any Error)?] {
        await withCheckedContinuation { continuation in
            let errors = state.withLock { state -> [(any Error)?]? in
                if state.outstanding == 0 { return state.errors }
                state.waiter = continuation
                return nil
            }
            if let errors { continuation.resume(returning: errors) }
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
