import CRdKafka
import KafkaMessages
import Logging

/// The group that read a consumer's topics before its own group did (an upgrade gave them a
/// group of their own): an assigned partition the consumer's group never committed starts at
/// the committed offset of that group instead of `auto.offset.reset`, so an upgrade neither
/// reads a retained topic again nor skips it.
final class OffsetSeed: Sendable {
    let group: String
    let configuration: KafkaConfiguration
    let logger: Logger

    init(group: String, configuration: KafkaConfiguration, logger: Logger) {
        self.group = group
        self.configuration = configuration
        self.logger = logger
    }

    /// Sets, in the assignment `list`, the start of each partition `handle`'s group has no
    /// committed offset for to `group`'s committed offset. Runs inside the rebalance callback
    /// (on the consumer's poll thread), before the partitions are assigned: two offset fetches
    /// the first time, one per assignment after.
    func startUncommitted(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>, of handle: OpaquePointer) {
        let own = rd_kafka_topic_partition_list_copy(list)!
        defer { rd_kafka_topic_partition_list_destroy(own) }
        guard fetchCommitted(own, handle, of: "its own group") else { return }
        let uncommitted = rd_kafka_topic_partition_list_new(own.pointee.cnt)!
        defer { rd_kafka_topic_partition_list_destroy(uncommitted) }
        for index in 0..<Int(own.pointee.cnt) where own.pointee.elems[index].offset < 0 {
            rd_kafka_topic_partition_list_add(uncommitted, own.pointee.elems[index].topic, own.pointee.elems[index].partition)
        }
        guard uncommitted.pointee.cnt > 0 else { return }
        // A handle of the earlier group that never joins it: fetching a group's committed
        // offsets needs no membership.
        guard
            let earlier = try? RDKafkaClient(
                kind: .consumer,
                configuration: configuration,
                properties: ["group.id": group, "enable.auto.commit": "false"],
                logger: logger
            ),
            (try? earlier.immediate { fetchCommitted(uncommitted, $0, of: group) }) == true
        else { return }
        let starts = seededStartOffsets(committed: Self.offsets(in: own), committedByEarlierGroup: Self.offsets(in: uncommitted))
        var seeded: [String] = []
        for (partition, offset) in starts.sorted(by: { ($0.key.topic, $0.key.partition) < ($1.key.topic, $1.key.partition) }) {
            rd_kafka_topic_partition_list_find(list, partition.topic, partition.partition)?.pointee.offset = offset
            seeded.append("\(partition.topic)[\(partition.partition)]@\(offset)")
        }
        if !seeded.isEmpty {
            logger.notice(
                "partitions start where the group before this one committed",
                metadata: ["kafka.seed_group": "\(group)", "kafka.partitions": "\(seeded)"]
            )
        }
    }

    /// The offset of each partition in `list`.
    private static func offsets(in list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> [KafkaTopicPartition: Int64] {
        var offsets: [KafkaTopicPartition: Int64] = [:]
        for index in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[index]
            offsets[KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition)] = element.offset
        }
        return offsets
    }

    /// Fills `list`'s offsets with `handle`'s group's committed ones; false (logged) when the
    /// broker did not answer within 10 s, and the partitions start by `auto.offset.reset`.
    private func fetchCommitted(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>, _ handle: OpaquePointer, of name: String) -> Bool {
        let error = rd_kafka_committed(handle, list, 10_000)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            logger.error(
                "cannot read committed offsets to seed a new group; its partitions start by auto.offset.reset",
                metadata: ["kafka.seed_group": "\(group)", "kafka.error": "\(String(cString: rd_kafka_err2str(error))) (\(name))"]
            )
            return false
        }
        return true
    }
}
