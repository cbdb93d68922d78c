package import APNSHTTP2
package import FCMHTTP
package import PostgresTokenStore
import Foundation
package import KafkaTransport
package import Logging
package import PushPipeline

/// Everything `herald` is configured with, read from HERALD_* variables (the README's configuration table)
/// and the YAML or JSON file HERALD_CONFIG_FILE names (``HeraldConfigurationSource``).
package struct HeraldConfiguration: Sendable {
    package var kafka: KafkaConfiguration
    /// The urgent lane's consumer group (HERALD_KAFKA_GROUP): push.requests, push.tokens, push.channels.
    package var consumerGroup: String
    /// The bulk lane's consumer group, of its own: `consumerGroup` + ".bulk" (push.requests.bulk).
    package var bulkConsumerGroup: String { consumerGroup + ".bulk" }
    package var pipeline: PipelineConfiguration
    package var postgresURL: PostgresURL
    /// The most PostgreSQL connections the service opens (HERALD_POSTGRES_POOL_SIZE).
    package var postgresPoolSize: Int
    /// Ledger pruning, token purging and tombstone clean-up (HERALD_LEDGER_RETENTION_HOURS,
    /// HERALD_TOKEN_PURGE_DAYS, HERALD_TOKEN_TOMBSTONE_DAYS, HERALD_HOUSEKEEPING_INTERVAL_S).
    package var housekeeping: HousekeepingConfiguration
    /// nil when no APNs credential is configured (only `herald migrate` can run then).
    package var apns: APNSClientConfiguration?
    /// Where broadcasts to Live Activity channels go (HERALD_APNS_BROADCAST_PRODUCTION_URL and
    /// _SANDBOX_URL); nil when they go to the device hosts (the default).
    package var broadcastEndpoints: (production: APNSClientConfiguration.Endpoint, sandbox: APNSClientConfiguration.Endpoint)?
    /// The channel management API's hosts (HERALD_APNS_CHANNELS_PRODUCTION_URL and _SANDBOX_URL).
    package var channelManagementEndpoints: (production: APNSClientConfiguration.Endpoint, sandbox: APNSClientConfiguration.Endpoint)
    /// FCM's settings and credentials (HERALD_FCM_* and the credentials file's FCM entries); nil
    /// when no FCM credential is configured (an APNs-only deployment: no FCM client is built).
    package var fcm: FCMClientConfiguration?
    /// HERALD_APNS_CREDENTIALS_FILE, re-read on SIGHUP and every ``apnsCredentialsCheckInterval``.
    package var apnsCredentialsFile: String?
    /// How often the credentials file is checked for changes (HERALD_APNS_CREDENTIALS_CHECK_S).
    package var apnsCredentialsCheckInterval: Duration
    package var shutdownGracePeriod: Duration
    package var httpPort: Int
    package var logLevel: Logger.Level
    package var logFormat: LogFormat
    /// Whether `herald run` applies migrations before it starts consuming.
    package var migrateOnStart: Bool
    /// Whether events and sends are traced and exported over OTLP/HTTP (HERALD_OTEL_TRACES;
    /// default: on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set).
    /// The exporter reads the standard OTEL_* variables.
    package var tracesEnabled: Bool

    package enum LogFormat: String, Sendable {
        case json
        case text
    }

    /// The service's own keys (the rest are its components': ``keys``).
    static let serviceKeys = [
        "HERALD_CONFIG_FILE", "HERALD_POSTGRES_URL", "HERALD_POSTGRES_URL_FILE", "HERALD_POSTGRES_POOL_SIZE", "HERALD_SHUTDOWN_GRACE_S", "HERALD_HTTP_PORT",
        "HERALD_OTEL_TRACES", "HERALD_LOG_LEVEL", "HERALD_LOG_FORMAT", "HERALD_MIGRATE_ON_START",
    ]

    /// Every HERALD_* key Herald reads, as the README's configuration table lists them: each
    /// component's configuration declares the keys it reads, beside the code that reads them;
    /// other HERALD_KAFKA_* keys pass through to librdkafka.
    package static let keys = Set(
        serviceKeys + KafkaConfiguration.keys + PipelineConfiguration.keys + HousekeepingConfiguration.keys + APNSClientConfiguration.keys
            + FCMClientConfiguration.configKeys.map(FCMClientConfiguration.environmentName(of:))
    )

    /// HERALD_* keys given that Herald does not read, each with the closest known key when one
    /// is near: `herald` reports them at start-up, so a typo is not silently ignored.
    package var unknownKeys: [String] = []
    /// APNs certificates that expired, expire within 30 days, or were not issued for a bundle
    /// ID they are configured for: `herald` reports them at start-up.
    package var certificateProblems: [String] = []
    /// Every key read that has a value, as `KEY = [type: value] (source)`; secrets show as
    /// `<REDACTED>` (swift-configuration's redaction). `herald config check` prints them.
    package var effectiveValues: [String] = []
    /// The keys left unset that Herald applied a default to, with that default, as text; the
    /// README's table is checked against them. `herald config check` prints them too.
    package var defaultsApplied: [String: String] = [:]

    /// Reads the configuration. A value in `environment` wins over the same key in the YAML or
    /// JSON file named by HERALD_CONFIG_FILE.
    package init(environment: [String: String]) async throws {
        let source = try await HeraldConfigurationSource(environment: environment)
        for key in source.givenKeys.sorted() where key.hasPrefix("HERALD_") && !key.hasPrefix("HERALD_KAFKA_") && !Self.keys.contains(key) {
            let closest = Self.keys.min { Self.editDistance($0, key) < Self.editDistance($1, key) }
            let hint = closest.map { Self.editDistance($0, key) <= 3 ? " (did you mean \($0)?)" : "" } ?? ""
            unknownKeys.append("\(key) is not a Herald configuration key\(hint)")
        }

        kafka = try KafkaConfiguration(reading: source)
        consumerGroup = KafkaConfiguration.consumerGroup(reading: source)
        housekeeping = try HousekeepingConfiguration(reading: source)
        pipeline = try PipelineConfiguration(reading: source, ledgerRetention: housekeeping.ledgerRetention)
        if let path = source["HERALD_POSTGRES_URL_FILE"] {
            guard source["HERALD_POSTGRES_URL"] == nil else {
                throw ConfigurationError("set HERALD_POSTGRES_URL or HERALD_POSTGRES_URL_FILE, not both")
            }
            postgresURL = try PostgresURL(SecretFile.read(path, for: "HERALD_POSTGRES_URL_FILE"))
        } else {
            postgresURL = try PostgresURL(source.string("HERALD_POSTGRES_URL", default: "postgres://localhost/herald"))
        }
        postgresPoolSize = try source.integer("HERALD_POSTGRES_POOL_SIZE", default: 20, in: 1...1000)
        let apnsSettings = try APNSClientConfiguration.Settings(reading: source)
        apns = apnsSettings.client
        certificateProblems = apnsSettings.certificateProblems
        broadcastEndpoints = apnsSettings.broadcastEndpoints
        channelManagementEndpoints = apnsSettings.channelManagementEndpoints
        apnsCredentialsFile = apnsSettings.credentialsFile
        apnsCredentialsCheckInterval = apnsSettings.credentialsCheckInterval
        let fcmEntries = try apnsSettings.credentialsFile.map(APNSCredentialsFile.fcmEntries(path:)) ?? []
        do {
            fcm = try FCMClientConfiguration(reading: source.herald, entries: fcmEntries)
        } catch {
            throw ConfigurationError("\(error)")
        }
        shutdownGracePeriod = .seconds(try source.integer("HERALD_SHUTDOWN_GRACE_S", default: 20, in: 0...3600))
        httpPort = try source.integer("HERALD_HTTP_PORT", default: 8080, in: 0...65_535)
        let levelText = source.string("HERALD_LOG_LEVEL", default: "info")
        guard let level = Logger.Level(rawValue: levelText.lowercased()) else {
            throw ConfigurationError("HERALD_LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
        }
        logLevel = level
        guard let format = LogFormat(rawValue: (source.string("HERALD_LOG_FORMAT", default: "json")).lowercased()) else {
            throw ConfigurationError("HERALD_LOG_FORMAT must be json or text")
        }
        logFormat = format
        migrateOnStart = try source.boolean("HERALD_MIGRATE_ON_START", default: false)
        let otlpEndpointSet = environment["OTEL_EXPORTER_OTLP_ENDPOINT"] != nil || environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != nil
        tracesEnabled = try source.boolean("HERALD_OTEL_TRACES", default: otlpEndpointSet)
        effectiveValues = source.effectiveValues
        defaultsApplied = source.defaultsApplied
    }

    /// Levenshtein distance, for naming the key a typo meant.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// A configuration problem, worded as the one line `herald` prints before exiting with code 2.
package struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}

extension HeraldConfigurationSource {
    /// The text of `key`, `defaultValue` when unset.
    func string(_ key: String, default defaultValue: String) -> String {
        guard let text = self[key] else { return applying(defaultValue, to: key) }
        return text
    }

    /// An integer in `range`, `defaultValue` when unset.
    func integer(_ key: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = self[key] else { return applying(defaultValue, to: key) }
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError("\(key) must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// `true`/`yes`/`1` or `false`/`no`/`0`, `defaultValue` when unset.
    func boolean(_ key: String, default defaultValue: Bool) throws -> Bool {
        guard let text = self[key]?.lowercased() else { return applying(defaultValue, to: key) }
        switch text {
        case "1", "true", "yes": return true
        case "0", "false", "no": return false
        default: throw ConfigurationError("\(key) must be true or false")
        }
    }
}
