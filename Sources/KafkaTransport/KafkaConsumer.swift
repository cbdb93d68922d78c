import PushCore
import CRdKafka
package import KafkaMessages
import Synchronization
package import Logging
import ServiceLifecycle

/// A member of a Kafka consumer group with manual offset commits.
///
/// Herald commits explicitly: nothing is committed until ``commit(_:)`` is called, so a message
/// is acknowledged only after its results are published. `run()` keeps the member alive and,
/// on graceful shutdown, leaves the group cleanly.
package final class KafkaConsumer: Service, Sendable {
    private let client: RDKafkaClient
    /// Whether a subscribed topic was reported missing already (logged once, then ignored).
    private let reportedMissingTopic = Atomic(false)

    /// Creates the consumer and subscribes to `topics` in group `groupID`.
    ///
    /// - Parameter seedGroup: the group that read `topics` before `groupID` did (an upgrade moved
    ///   them): a partition `groupID` has no committed offset for starts at `seedGroup`'s
    ///   committed offset, read when the partition is assigned, before its first fetch.
    package init(configuration: KafkaConfiguration, groupID: String, topics: [String], seedingOffsetsFrom seedGroup: String? = nil, logger: Logger) throws {
        var logger = logger
        logger[metadataKey: "kafka.group.id"] = "\(groupID)"
        self.client = try RDKafkaClient(
            kind: .consumer,
            configuration: configuration,
            properties: [
                "group.id": groupID,
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "auto.offset.reset": "earliest",
                // Prefetch at most 16 MB (librdkafka's default is 64 MB): tens of thousands of
                // events, far more than Herald's window takes at once, while a backlog's
                // prefetch no longer dominates RSS (a long burst's peak RSS fell at the same
                // throughput; BENCHMARKS.md, "What each change bought").
                "queued.max.messages.kbytes": "16384",
                // A fetch is answered as soon as one byte is there (Apache Kafka), and an idle
                // partition's fetch is held at most 500 ms: lower would only add idle fetches on
                // Apache Kafka. Tansu (the test broker) holds every fetch for the whole wait, so
                // its deliveries come in bursts; docs/lanes-and-latency.md shows the figures both ways.
                "fetch.min.bytes": "1",
                "fetch.wait.max.ms": "500",
            ],
            offsetSeed: seedGroup.map { OffsetSeed(group: $0, configuration: configuration, logger: logger) },
            logger: logger
        )
        try client.immediate { handle in
            // Messages are served by rd_kafka_consumer_poll, not the main queue.
            rd_kafka_poll_set_consumer(handle)
            let list = rd_kafka_topic_partition_list_new(Int32(topics.count))
            defer { rd_kafka_topic_partition_list_destroy(list) }
            for topic in topics {
                rd_kafka_topic_partition_list_add(list, topic, RD_KAFKA_PARTITION_UA)
            }
            let error = rd_kafka_subscribe(handle, list)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
                throw KafkaError.subscription(String(cString: rd_kafka_err2str(error)))
            }
        }
    }

    /// Waits up to `timeout` for the first message, then takes whatever else is already
    /// fetched, up to `maxMessages`. Returns an empty array when nothing arrived.
    package func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let timeoutMilliseconds = Int32(clamping: timeout.wholeMilliseconds)
        let logger = client.logger
        return try await client.blocking { handle in
            var messages: [KafkaMessage] = []
            var wait = timeoutMilliseconds
            while messages.count < maxMessages, let raw = rd_kafka_consumer_poll(handle, wait) {
                defer { rd_kafka_message_destroy(raw) }
                wait = 0
                let error = raw.pointee.err
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
                    let missingTopic = error == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || error == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
                    // librdkafka repeats it on every metadata refresh; the member serves its other topics meanwhile.
                    if missingTopic, self.reportedMissingTopic.exchange(true, ordering: .relaxed) { continue }
                    logger.warning(
                        missingTopic ? "a subscribed topic does not exist; consuming the others" : "consumer error",
                        metadata: ["kafka.error": "\(String(cString: rd_kafka_err2str(error)))"]
                    )
                    continue
                }
                messages.append(KafkaMessage(raw))
            }
            var fatal = [CChar](repeating: 0, count: 512)
            let fatalError = rd_kafka_fatal_error(handle, &fatal, fatal.count)
            if fatalError != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError.subscription("fatal: \(String(nulTerminated: fatal))")
            }
            return messages
        }
    }

    /// Commits `offsets` (for each partition, the offset of the next message to read) and
    /// waits for the broker's answer, for the partitions assigned to this member when it runs
    /// (``offsetsOfAssignedPartitions(_:assigned:)``): it runs on the client's queue, where the
    /// rebalance callback runs too, so nothing can change the assignment in between.
    package func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws {
        guard !offsets.isEmpty else { return }
        try await client.blocking { handle in
            var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
            guard rd_kafka_assignment(handle, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return }
            let kept = offsetsOfAssignedPartitions(offsets, assigned: Set(KafkaTopicPartition.all(in: assignment)))
            rd_kafka_topic_partition_list_destroy(assignment)
            guard !kept.isEmpty else { return }
            let list = KafkaTopicPartition.makeList(kept)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_commit(handle, list, 0)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR || error == RD_KAFKA_RESP_ERR__NO_OFFSET else {
                throw KafkaError.commit(String(cString: rd_kafka_err2str(error)))
            }
        }
    }

    /// The partition's high watermark (the offset after its last record) as of the consumer's
    /// latest fetch, or nil before one. A non-blocking read of librdkafka's cached value.
    package func highWatermark(_ partition: KafkaTopicPartition) -> Int64? {
        try? client.immediate { handle -> Int64? in
            var low: Int64 = -1
            var high: Int64 = -1
            let error = rd_kafka_get_watermark_offsets(handle, partition.topic, partition.partition, &low, &high)
            return error == RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0 ? high : nil
        }
    }

    /// Whether the group has assigned this member its partitions (none is an assignment too),
    /// and the assignment has not been lost since.
    package var hasJoinedGroup: Bool {
        client.context.hasJoinedGroup.load(ordering: .relaxed)
    }

    /// Registers who finishes and commits a partition's work before a rebalance takes it away.
    package func setRebalanceListener(_ listener: any KafkaRebalanceListener) {
        client.context.rebalanceListener.withLock { $0 = listener }
    }

    /// Stops fetching from every assigned partition (messages already fetched may still arrive).
    package func pauseAll() async throws {
        try await changeAssignedPartitions(pause: true)
    }

    /// Resumes fetching from every assigned partition.
    package func resumeAll() async throws {
        try await changeAssignedPartitions(pause: false)
    }

    private func changeAssignedPartitions(pause: Bool) async throws {
        try await client.blocking { handle in
            var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
            guard rd_kafka_assignment(handle, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return }
            defer { rd_kafka_topic_partition_list_destroy(assignment) }
            _ = pause ? rd_kafka_pause_partitions(handle, assignment) : rd_kafka_resume_partitions(handle, assignment)
        }
    }

    /// Keeps the member alive until graceful shutdown or cancellation, then leaves the group
    /// (unless ``leaveGroup()`` did already).
    package func run() async throws {
        try? await gracefulShutdown()
        await leaveGroup()
    }

    /// Leaves the group (librdkafka revokes the partitions, which commits what the listener
    /// returns) and destroys the client; polls and commits throw from then on.
    package func leaveGroup() async {
        await client.destroy { handle in
            _ = rd_kafka_consumer_close(handle)
        }
    }
}

extension KafkaMessage {
    /// Copies a consumed rd_kafka_message_t into Swift values.
    fileprivate init(_ raw: UnsafeMutablePointer<rd_kafka_message_t>) {
        let message = raw.pointee
        let topic = message.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
        let key = message.key.map { Array(UnsafeRawBufferPointer(start: $0, count: message.key_len)) }
        let value = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: message.len)) }
        var headers: [KafkaHeader] = []
        var rawHeaders: OpaquePointer?
        if rd_kafka_message_headers(raw, &rawHeaders) == RD_KAFKA_RESP_ERR_NO_ERROR, let rawHeaders {
            var index = 0
            var name: UnsafePointer<CChar>?
            var headerValue: UnsafeRawPointer?
            var size = 0
            while rd_kafka_header_get_all(rawHeaders, index, &name, &headerValue, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(
                    KafkaHeader(
                        key: name.map { String(cString: $0) } ?? "",
                        value: headerValue.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }
                    )
                )
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(raw, &timestampType)
        self.init(
            topic: topic,
            partition: message.partition,
            offset: message.offset,
            key: key,
            value: value,
            headers: headers,
            timestampMilliseconds: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || timestamp < 0 ? nil : timestamp
        )
    }
}
