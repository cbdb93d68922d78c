import Foundation
import KafkaTransport

extension KafkaConfiguration {
    /// The keys of Herald's own meaning under HERALD_KAFKA_; every other HERALD_KAFKA_* key is a
    /// librdkafka property.
    static let keys = ["HERALD_KAFKA_BROKERS", "HERALD_KAFKA_GROUP", "HERALD_KAFKA_SASL_PASSWORD_FILE"]

    /// The brokers, and every other HERALD_KAFKA_* variable as a librdkafka property:
    /// HERALD_KAFKA_SESSION_TIMEOUT_MS → session.timeout.ms. HERALD_KAFKA_SASL_PASSWORD_FILE names
    /// a file whose content (without a final newline) is `sasl.password`, so the password need
    /// not be an environment variable.
    init(reading source: HeraldConfigurationSource) throws {
        let prefix = "HERALD_KAFKA_"
        var properties: [String: String] = [:]
        for key in source.givenKeys where key.hasPrefix(prefix) && !Self.keys.contains(key) {
            let name = key.dropFirst(prefix.count)
            guard !name.isEmpty, let value = source[key] else { continue }
            properties[name.lowercased().replacingOccurrences(of: "_", with: ".")] = value
        }
        if let path = source["HERALD_KAFKA_SASL_PASSWORD_FILE"] {
            guard properties["sasl.password"] == nil else {
                throw ConfigurationError("set HERALD_KAFKA_SASL_PASSWORD or HERALD_KAFKA_SASL_PASSWORD_FILE, not both")
            }
            properties["sasl.password"] = try SecretFile.read(path, for: "HERALD_KAFKA_SASL_PASSWORD_FILE")
        }
        self.init(bootstrapServers: source.string("HERALD_KAFKA_BROKERS", default: "127.0.0.1:9092"), properties: properties)
    }

    /// The consumer group (HERALD_KAFKA_GROUP).
    static func consumerGroup(reading source: HeraldConfigurationSource) -> String {
        source.string("HERALD_KAFKA_GROUP", default: "herald")
    }
}
