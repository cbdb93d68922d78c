import Foundation
import KafkaTransport

extension KafkaConfiguration {
    /// The keys of Herald's own meaning under HERALD_KAFKA_; every other HERALD_KAFKA_* key is a
    /// librdkafka property.
    static let keys = ["HERALD_KAFKA_BROKERS", "HERALD_KAFKA_GROUP"]

    /// The brokers, and every other HERALD_KAFKA_* variable as a librdkafka property:
    /// HERALD_KAFKA_SESSION_TIMEOUT_MS → session.timeout.ms.
    init(reading source: HeraldConfigurationSource) {
        let prefix = "HERALD_KAFKA_"
        var properties: [String: String] = [:]
        for key in source.givenKeys where key.hasPrefix(prefix) && !Self.keys.contains(key) {
            let name = key.dropFirst(prefix.count)
            guard !name.isEmpty, let value = source[key] else { continue }
            properties[name.lowercased().replacingOccurrences(of: "_", with: ".")] = value
        }
        self.init(bootstrapServers: source.string("HERALD_KAFKA_BROKERS", default: "127.0.0.1:9092"), properties: properties)
    }

    /// The consumer group (HERALD_KAFKA_GROUP).
    static func consumerGroup(reading source: HeraldConfigurationSource) -> String {
        source.string("HERALD_KAFKA_GROUP", default: "herald")
    }
}
