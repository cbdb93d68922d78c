import KafkaMessages
import KafkaTransport
import Metrics
import Synchronization

/// Kafka's side of /metrics, read when it is scraped: the producer's queue
/// (`herald_kafka_producer_queue`) and, per partition this member holds, the offset it committed
/// (`herald_committed_offset{topic,partition,lane}`) and the records after it
/// (`herald_consumer_lag{topic,partition,lane}`: the high watermark of the consumer's last fetch
/// minus the committed offset). `lane` is `bulk` for the bulk topic, else `urgent`, so alerts and
/// dashboards tell a campaign's backlog from a delay. A partition's gauges go when it does.
final class KafkaMetrics: Sendable {
    private struct PartitionGauges: Sendable {
        var committed: Gauge
        var lag: Gauge
    }

    private let factory: any MetricsFactory
    private let producerQueue: Gauge
    private let partitions = Mutex<[KafkaTopicPartition: PartitionGauges]>([:])
    private let bulkTopic: String

    /// `bulkTopic` is the bulk lane's topic (HERALD_TOPIC_BULK_REQUESTS).
    init(factory: any MetricsFactory, bulkTopic: String) {
        self.factory = factory
        self.bulkTopic = bulkTopic
        producerQueue = Gauge(label: "herald_kafka_producer_queue", factory: factory)
    }

    func refresh(producerQueue queued: Int, committed: [KafkaTopicPartition: Int64], highWatermark: (KafkaTopicPartition) -> Int64?) {
        producerQueue.record(queued)
        let gone = partitions.withLock { gauges -> [PartitionGauges] in
            for (partition, offset) in committed {
                let partitionGauges = gauges[partition] ?? makeGauges(partition)
                gauges[partition] = partitionGauges
                partitionGauges.committed.record(offset)
                if let high = highWatermark(partition) { partitionGauges.lag.record(max(0, high - offset)) }
            }
            let revoked = gauges.keys.filter { committed[$0] == nil }
            return revoked.compactMap { gauges.removeValue(forKey: $0) }
        }
        for gauges in gone {
            gauges.committed.destroy()
            gauges.lag.destroy()
        }
    }

    private func makeGauges(_ partition: KafkaTopicPartition) -> PartitionGauges {
        let lane = partition.topic == bulkTopic ? "bulk" : "urgent"
        let dimensions = [("topic", partition.topic), ("partition", String(partition.partition)), ("lane", lane)]
        return PartitionGauges(
            committed: Gauge(label: "herald_committed_offset", dimensions: dimensions, factory: factory),
            lag: Gauge(label: "herald_consumer_lag", dimensions: dimensions, factory: factory)
        )
    }
}
