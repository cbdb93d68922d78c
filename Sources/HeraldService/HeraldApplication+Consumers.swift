package import KafkaTransport
package import Logging
import PushPipeline

extension HeraldApplication {
    /// The two group members of one Herald: the urgent lane's (push.requests, push.tokens,
    /// push.channels) in HERALD_KAFKA_GROUP, and the bulk lane's (push.requests.bulk) in a group
    /// of its own, HERALD_KAFKA_GROUP + ".bulk". Apart, neither lane's rebalance waits for the
    /// other's drain (with the eager protocol a rebalance ends only when every member of the
    /// group has rejoined), and the bulk lane's fetch queue never holds push.requests back. A
    /// missing bulk topic is logged once and ignored. Releases before the bulk group read
    /// push.requests.bulk in HERALD_KAFKA_GROUP: a partition the bulk group never committed
    /// starts where that group did.
    package static func makeConsumers(
        _ configuration: HeraldConfiguration,
        logger: Logger
    ) throws -> (urgent: KafkaConsumer, bulk: KafkaConsumer) {
        let topics = configuration.pipeline.topics
        let urgent = try KafkaConsumer(
            configuration: configuration.kafka,
            groupID: configuration.consumerGroup,
            topics: topics.subscriptions(bulk: false),
            logger: logger
        )
        let bulk = try KafkaConsumer(
            configuration: configuration.kafka,
            groupID: configuration.bulkConsumerGroup,
            topics: topics.subscriptions(bulk: true),
            seedingOffsetsFrom: configuration.consumerGroup,
            logger: logger
        )
        return (urgent, bulk)
    }
}
