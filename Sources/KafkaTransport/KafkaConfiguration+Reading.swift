package import ConfigReading
package import Configuration
import Foundation

extension KafkaConfiguration {
    /// The brokers when HERALD_KAFKA_BROKERS is unset.
    package static let defaultBootstrapServers = "127.0.0.1:9092"
    /// The urgent lane's consumer group when HERALD_KAFKA_GROUP is unset.
    package static let defaultConsumerGroup = "herald"

    /// The keys of Herald's own meaning under `kafka`, relative to Herald's reader (scoped to
    /// `herald`: `kafka.brokers` is HERALD_KAFKA_BROKERS); every other HERALD_KAFKA_* key is a
    /// librdkafka property.
    package static let configKeys: [ConfigKey] = [["kafka", "brokers"], ["kafka", "group"], ["kafka", "sasl_password_file"]]

    /// Whether the HERALD_KAFKA_* key `name` holds a secret (librdkafka's passwords, secrets,
    /// keys and tokens, and the password file's path): it is read as one, so `herald config
    /// check` shows its value as `<REDACTED>`.
    package static func isSecret(environmentName name: String) -> Bool {
        ["PASSWORD", "SECRET", "_KEY_PEM", "TOKEN"].contains { name.contains($0) }
    }

    /// Reads the brokers, and every other HERALD_KAFKA_* key among `givenKeys` (the environment
    /// names given) as a librdkafka property: HERALD_KAFKA_SESSION_TIMEOUT_MS →
    /// session.timeout.ms. HERALD_KAFKA_SASL_PASSWORD_FILE names a file whose content (without a
    /// final newline) is `sasl.password`, so the password need not be an environment variable.
    package init(reading config: ConfigReader, givenKeys: some Sequence<String>) throws(ConfigurationValueError) {
        let prefix = "HERALD_KAFKA_"
        let ownNames = Set(Self.configKeys.map(\.environmentName))
        var properties: [String: String] = [:]
        for name in givenKeys where name.hasPrefix(prefix) && !ownNames.contains(name) {
            let property = name.dropFirst(prefix.count).lowercased()
            guard !property.isEmpty,
                let value = config.string(forKey: ConfigKey(["kafka", property]), isSecret: Self.isSecret(environmentName: name))
            else { continue }
            properties[property.replacingOccurrences(of: "_", with: ".")] = value
        }
        let passwordFileKey: ConfigKey = ["kafka", "sasl_password_file"]
        if let path = config.string(forKey: passwordFileKey, isSecret: Self.isSecret(environmentName: passwordFileKey.environmentName)) {
            guard properties["sasl.password"] == nil else {
                throw ConfigurationValueError("set HERALD_KAFKA_SASL_PASSWORD or HERALD_KAFKA_SASL_PASSWORD_FILE, not both")
            }
            properties["sasl.password"] = try SecretFile.read(path, for: passwordFileKey)
        }
        self.init(bootstrapServers: config.string(forKey: ["kafka", "brokers"], default: Self.defaultBootstrapServers), properties: properties)
    }

    /// Reads the urgent lane's consumer group (HERALD_KAFKA_GROUP) from `config`.
    package static func consumerGroup(reading config: ConfigReader) -> String {
        config.string(forKey: ["kafka", "group"], default: defaultConsumerGroup)
    }
}
