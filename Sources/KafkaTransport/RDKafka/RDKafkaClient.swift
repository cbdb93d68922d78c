import KafkaMessages
import CRdKafka
import Dispatch
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A librdkafka handle with the thread its blocking calls run on.
///
/// Every call that can block (poll, commit, flush, close, destroy) goes through ``blocking(_:)``,
/// which runs it on this client's own serial dispatch queue and never on Swift's cooperative pool.
final class RDKafkaClient: Sendable {
    enum Kind {
        case consumer
        case producer
    }

    /// The rd_kafka_t pointer (nil once destroyed) and how many ``immediate(_:)`` calls are using
    /// it right now. Blocking calls run on `queue`, which is serial, and so does `destroy`, which
    /// also waits for the immediate calls in progress: no call can race the handle's destruction.
    private let handle: Mutex<HandleState>
    private let queue: DispatchQueue
    /// Retained for the handle's lifetime as librdkafka's opaque; released after destroy.
    private let retainedContext: Unmanaged<RDKafkaClientContext>
    /// What librdkafka's callbacks reach.
    let context: RDKafkaClientContext
    let logger: Logger

    init(kind: Kind, configuration: KafkaConfiguration, properties: [String: String], offsetSeed: OffsetSeed? = nil, logger: Logger) throws {
        guard let conf = rd_kafka_conf_new() else { throw KafkaError.clientCreation("rd_kafka_conf_new failed") }
        var all = configuration.properties
        all["bootstrap.servers"] = configuration.bootstrapServers
        for (name, value) in properties where all[name] == nil { all[name] = value }
        var errorText = [CChar](repeating: 0, count: 512)
        for (name, value) in all.sorted(by: { $0.key < $1.key }) {
            if rd_kafka_conf_set(conf, name, value, &errorText, errorText.count) != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                // The value is left out on purpose: it may be a password.
                throw KafkaError.configuration("property \(name): \(String(nulTerminated: errorText))")
            }
        }
        let context = Unmanaged.passRetained(RDKafkaClientContext(logger: logger, offsetSeed: offsetSeed))
        rd_kafka_conf_set_opaque(conf, context.toOpaque())
        rd_kafka_conf_set_log_cb(conf, rdKafkaLog)
        rd_kafka_conf_set_error_cb(conf, rdKafkaError)
        if kind == .consumer {
            rd_kafka_conf_set_rebalance_cb(conf, rdKafkaRebalance)
        }
        if kind == .producer {
            rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR)
            rd_kafka_conf_set_background_event_cb(conf, rdKafkaBackgroundEvent)
        }
        let type = kind == .consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER
        // On success rd_kafka_new owns conf; on failure the caller still does.
        guard let pointer = rd_kafka_new(type, conf, &errorText, errorText.count) else {
            rd_kafka_conf_destroy(conf)
            context.release()
            throw KafkaError.clientCreation(String(nulTerminated: errorText))
        }
        if kind == .producer {
            // Delivery reports are posted to the main queue; forwarding it to the background
            // queue lets librdkafka's own thread run the callback, so no Swift thread polls.
            let main = rd_kafka_queue_get_main(pointer)
            let background = rd_kafka_queue_get_background(pointer)
            rd_kafka_queue_forward(main, background)
            rd_kafka_queue_destroy(main)
            rd_kafka_queue_destroy(background)
        }
        self.handle = Mutex(HandleState(handle: RDKafkaHandle(pointer: pointer)))
        self.context = context.takeUnretainedValue()
        self.retainedContext = context
        self.queue = DispatchQueue(label: "herald.rdkafka.\(kind)")
        self.logger = logger
    }

    deinit {
        if let handle = handle.withLock({ $0.handle.take() }) {
            rd_kafka_destroy(handle.pointer)
        }
        retainedContext.release()
    }

    /// Runs a blocking librdkafka call on this client's queue; throws once the client is destroyed.
    func blocking<Value: Sendable>(
        _ body: @escaping @Sendable (OpaquePointer) throws -> Value
    ) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                guard let handle = self.handle.withLock({ $0.handle }) else {
                    continuation.resume(throwing: KafkaError.closed())
                    return
                }
                continuation.resume(with: Result { try body(handle.pointer) })
            }
        }
    }

    /// Runs a non-blocking librdkafka call right here; throws once the client is destroyed.
    /// While it runs, the handle is counted as in use, so ``destroy(after:)`` waits for it.
    func immediate<Value>(_ body: (OpaquePointer) throws -> Value) throws -> Value {
        let handle = handle.withLock { state -> RDKafkaHandle? in
            guard let handle = state.handle, !state.destroying else { return nil }
            state.immediateCalls += 1
            return handle
        }
        guard let handle else { throw KafkaError.closed() }
        defer { self.handle.withLock { $0.immediateCalls -= 1 } }
        return try body(handle.pointer)
    }

    /// Runs `finalCall` (close or flush) and then destroys the handle, on the blocking queue.
    /// From the start no new ``immediate(_:)`` call begins; the destruction waits for those in
    /// progress (each is a non-blocking librdkafka call, so the wait is short).
    func destroy(after finalCall: @escaping @Sendable (OpaquePointer) -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                guard
                    let handle = self.handle.withLock({ state -> RDKafkaHandle? in
                        state.destroying = true
                        return state.handle
                    })
                else {
                    continuation.resume()
                    return
                }
                finalCall(handle.pointer)
                while self.handle.withLock({ $0.immediateCalls }) > 0 { usleep(100) }
                self.handle.withLock { $0.handle = nil }
                rd_kafka_destroy(handle.pointer)
                continuation.resume()
            }
        }
    }

    /// The handle and its users, behind ``handle``.
    struct HandleState {
        var handle: RDKafkaHandle?
        /// ``immediate(_:)`` calls running now.
        var immediateCalls = 0
        /// Set when ``destroy(after:)`` starts: no new immediate call may begin.
        var destroying = false
    }
}

/// The rd_kafka_t pointer as a value that may cross threads.
///
/// `@unchecked Sendable` is sound because librdkafka's handle is thread-safe for every call
/// Herald makes, and destruction is serialised on the client's queue after every other user
/// of the handle is done (``RDKafkaClient/HandleState``).
struct RDKafkaHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What librdkafka's callbacks need, reached through the handle's opaque pointer.
final class RDKafkaClientContext: Sendable {
    let logger: Logger
    let rebalanceListener = Mutex<(any KafkaRebalanceListener)?>(nil)
    /// Set when the group assigned this member partitions (possibly none), cleared when the
    /// assignment was lost without an orderly revocation.
    let hasJoinedGroup = Atomic(false)
    /// Where partitions without a committed offset start, if not by `auto.offset.reset`.
    let offsetSeed: OffsetSeed?

    init(logger: Logger, offsetSeed: OffsetSeed?) {
        self.logger = logger
        self.offsetSeed = offsetSeed
    }

    static func from(_ handle: OpaquePointer?) -> RDKafkaClientContext? {
        guard let handle, let opaque = rd_kafka_opaque(handle) else { return nil }
        return Unmanaged<RDKafkaClientContext>.fromOpaque(opaque).takeUnretainedValue()
    }
}

/// librdkafka's log lines (syslog levels) go to the client's logger.
private let rdKafkaLog: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    handle, level, facility, text in
    guard let context = RDKafkaClientContext.from(handle), let text else { return }
    let swiftLevel: Logger.Level =
        switch level {
        case ...3: .error
        case 4: .warning
        case 5, 6: .info
        default: .debug
        }
    context.logger.log(
        level: swiftLevel,
        "\(String(cString: text))",
        metadata: ["kafka.facility": "\(facility.map { String(cString: $0) } ?? "")"]
    )
}

/// Client-level errors (broker down, all brokers down…): informational, librdkafka recovers.
private let rdKafkaError: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
    handle, code, reason, _ in
    guard let context = RDKafkaClientContext.from(handle) else { return }
    let error = rd_kafka_resp_err_t(code)
    context.logger.warning(
        "librdkafka error",
        metadata: [
            "kafka.error": "\(String(cString: rd_kafka_err2name(error)))",
            "kafka.reason": "\(reason.map { String(cString: $0) } ?? "")",
        ]
    )
}

/// Delivery reports arrive on librdkafka's background thread; each message's opaque is the
/// retained ``ProduceAcknowledgement`` its sender awaits.
private let rdKafkaBackgroundEvent: @convention(c) (OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?) -> Void = {
    _, event, _ in
    guard let event else { return }
    defer { rd_kafka_event_destroy(event) }
    guard rd_kafka_event_type(event) == RD_KAFKA_EVENT_DR else { return }
    while let message = rd_kafka_event_message_next(event) {
        guard let opaque = message.pointee._private else { continue }
        let report = Unmanaged<ProduceAcknowledgement>.fromOpaque(opaque).takeRetainedValue()
        let error = message.pointee.err
        report.deliver(error == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError.delivery(ProduceErrorCause(error)))
    }
}

/// Who waits for the brokers' acknowledgement of one record (librdkafka's delivery report),
/// handed to librdkafka as the message's opaque: a single `send`, or one record of a
/// ``ProduceBatch``.
final class ProduceAcknowledgement: Sendable {
    private enum Waiter {
        case single(CheckedContinuation<Void, any Error>)
        case batch(ProduceBatch, index: Int)
    }

    private let waiter: Waiter

    init(_ continuation: CheckedContinuation<Void, any Error>) {
        waiter = .single(continuation)
    }

    init(_ batch: ProduceBatch, index: Int) {
        waiter = .batch(batch, index: index)
    }

    /// Reports the broker's answer: nil when the record was acknowledged.
    func deliver(_ error: KafkaError?) {
        switch waiter {
        case .single(let continuation):
            if let error { continuation.resume(throwing: error) } else { continuation.resume() }
        case .batch(let batch, let index):
            batch.deliver(error, at: index)
        }
    }
}

extension ProduceErrorCause {
    /// librdkafka's name and text for `error`.
    init(_ error: rd_kafka_resp_err_t) {
        self.init(name: String(cString: rd_kafka_err2name(error)), message: String(cString: rd_kafka_err2str(error)))
    }
}

extension String {
    /// Reads a NUL-terminated C string out of a buffer librdkafka filled in.
    init(nulTerminated buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Consumer-group rebalances, called from inside `rd_kafka_consumer_poll` on the consumer's own
/// queue: performs the steps ``RebalanceStep/steps(for:assignmentLost:)`` decides. Assignments
/// are applied at once; on revocation the listener finishes (or gives up on) the partitions'
/// in-flight work and its offsets are committed before the partitions go; a lost assignment is
/// reported and given back with nothing committed.
private let rdKafkaRebalance:
    @convention(c) (
        OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?
    ) -> Void = { handle, error, list, _ in
        guard let handle else { return }
        let context = RDKafkaClientContext.from(handle)
        let listener = context?.rebalanceListener.withLock { $0 }
        let rebalanceProtocol = String(cString: rd_kafka_rebalance_protocol(handle))
        let cooperative = rebalanceProtocol == "COOPERATIVE"
        let partitions = list.map { KafkaTopicPartition.all(in: $0) } ?? []
        let metadata: Logger.Metadata = ["kafka.partitions": "\(partitions)", "kafka.rebalance_protocol": "\(rebalanceProtocol)"]
        let callback: RebalanceCallback =
            switch error {
            case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS: .assign
            case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS: .revoke
            default: .error
            }
        let assignmentLost = callback == .revoke && rd_kafka_assignment_lost(handle) != 0
        for step in RebalanceStep.steps(for: callback, assignmentLost: assignmentLost) {
            switch step {
            case .seedUncommittedOffsets:
                if let list { context?.offsetSeed?.startUncommitted(list, of: handle) }
            case .assign:
                if cooperative {
                    _ = rd_kafka_incremental_assign(handle, list).map(rd_kafka_error_destroy)
                } else {
                    _ = rd_kafka_assign(handle, list)
                }
                context?.hasJoinedGroup.store(true, ordering: .relaxed)
            case .reportAssigned:
                context?.logger.info("partitions assigned", metadata: metadata)
                listener?.partitionsAssigned(partitions)
            case .reportLost:
                context?.logger.warning("partitions lost", metadata: metadata)
                listener?.partitionsLost(partitions)
            case .drainAndCommit:
                context?.logger.info("partitions revoked", metadata: metadata)
                guard let offsets = listener?.partitionsRevoked(partitions), !offsets.isEmpty else { continue }
                let commitList = KafkaTopicPartition.makeList(offsets)
                let commitError = rd_kafka_commit(handle, commitList, 0)
                rd_kafka_topic_partition_list_destroy(commitList)
                if commitError != RD_KAFKA_RESP_ERR_NO_ERROR {
                    context?.logger.warning(
                        "commit on revocation failed",
                        metadata: ["kafka.error": "\(String(cString: rd_kafka_err2str(commitError)))"]
                    )
                }
            case .unassign:
                unassign(handle, list, cooperative: cooperative)
            case .forgetAssignment:
                context?.logger.warning("rebalance error", metadata: ["kafka.error": "\(String(cString: rd_kafka_err2str(error)))"])
                context?.hasJoinedGroup.store(false, ordering: .relaxed)
                _ = rd_kafka_assign(handle, nil)
            }
        }
    }

/// Gives revoked or lost partitions back: incrementally under the cooperative protocol, the whole
/// assignment under the eager one.
private func unassign(_ handle: OpaquePointer, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, cooperative: Bool) {
    if cooperative {
        _ = rd_kafka_incremental_unassign(handle, list).map(rd_kafka_error_destroy)
    } else {
        _ = rd_kafka_assign(handle, nil)
    }
}

extension KafkaTopicPartition {
    /// The partitions of a librdkafka list.
    static func all(in list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> [KafkaTopicPartition] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition)
        }
    }

    /// A new librdkafka list with these offsets; the caller destroys it.
    static func makeList(_ offsets: [KafkaTopicPartition: Int64]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(offsets.count))!
        for (partition, offset) in offsets {
            rd_kafka_topic_partition_list_add(list, partition.topic, partition.partition)?.pointee.offset = offset
        }
        return list
    }
}
