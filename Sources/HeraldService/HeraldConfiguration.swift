package import APNSHTTP2
import APNSCore
package import PostgresTokenStore
import Foundation
package import KafkaTransport
package import Logging
package import PushPipeline
import NIOSSL

/// Everything `herald` is configured with, read from HERALD_* variables (the README's configuration table)
/// and the YAML or JSON file HERALD_CONFIG_FILE names (``HeraldConfigurationSource``).
package struct HeraldConfiguration: Sendable {
    package var kafka: KafkaConfiguration
    package var consumerGroup: String
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

    /// Every HERALD_* key Herald reads, as the README's configuration table lists them; other
    /// HERALD_KAFKA_* keys pass through to librdkafka.
    package static let keys: Set<String> = [
        "HERALD_CONFIG_FILE", "HERALD_KAFKA_BROKERS", "HERALD_KAFKA_GROUP",
        "HERALD_TOPIC_REQUESTS", "HERALD_TOPIC_TOKENS", "HERALD_TOPIC_RESULTS", "HERALD_TOPIC_UNREGISTERED", "HERALD_TOPIC_DLQ",
        "HERALD_TOPIC_CHANNELS", "HERALD_TOPIC_CHANNEL_RESULTS", "HERALD_TOPIC_BULK_REQUESTS", "HERALD_BULK_MAX_RATE",
        "HERALD_APNS_BROADCAST_PRODUCTION_URL", "HERALD_APNS_BROADCAST_SANDBOX_URL",
        "HERALD_APNS_CHANNELS_PRODUCTION_URL", "HERALD_APNS_CHANNELS_SANDBOX_URL",
        "HERALD_POSTGRES_URL", "HERALD_POSTGRES_POOL_SIZE",
        "HERALD_APNS_KEY_PATH", "HERALD_APNS_KEY_ID", "HERALD_APNS_TEAM_ID",
        "HERALD_APNS_CERT_PATH", "HERALD_APNS_CERT_PASSWORD", "HERALD_APNS_CERT_KEY_PATH", "HERALD_APNS_CREDENTIALS_FILE",
        "HERALD_APNS_CREDENTIALS_CHECK_S",
        "HERALD_APNS_PRODUCTION_URL", "HERALD_APNS_SANDBOX_URL", "HERALD_APNS_CA_PATH", "HERALD_APNS_CONNECTIONS",
        "HERALD_APNS_DERIVED_COLLAPSE_ID", "HERALD_RETRY_MAX_ATTEMPTS", "HERALD_DELIVERY_DEADLINE_S",
        "HERALD_SHUTDOWN_GRACE_S", "HERALD_HTTP_PORT", "HERALD_OTEL_TRACES", "HERALD_LOG_LEVEL", "HERALD_LOG_FORMAT",
        "HERALD_MIGRATE_ON_START", "HERALD_MAX_CONCURRENT_SENDS", "HERALD_MAX_IN_FLIGHT_MESSAGES", "HERALD_POLL_BATCH_SIZE",
        "HERALD_LEDGER_BATCH_SIZE", "HERALD_LEDGER_RETENTION_HOURS", "HERALD_TOKEN_PURGE_DAYS", "HERALD_TOKEN_TOMBSTONE_DAYS",
        "HERALD_HOUSEKEEPING_INTERVAL_S",
    ]

    /// HERALD_* keys given that Herald does not read, each with the closest known key when one
    /// is near: `herald` reports them at start-up, so a typo is not silently ignored.
    package var unknownKeys: [String] = []
    /// APNs certificates that expired, expire within 30 days, or were not issued for a bundle
    /// ID they are configured for: `herald` reports them at start-up.
    package var certificateProblems: [String] = []
    /// Every key read that has a value, as `KEY = [type: value] (source)`; secrets show as
    /// `<REDACTED>` (swift-configuration's redaction). `herald config check` prints them.
    package var effectiveValues: [String] = []

    /// Reads the configuration. A value in `environment` wins over the same key in the YAML or
    /// JSON file named by HERALD_CONFIG_FILE.
    package init(environment: [String: String]) async throws {
        let source = try await HeraldConfigurationSource(environment: environment)
        for key in source.givenKeys.sorted() where key.hasPrefix("HERALD_") && !key.hasPrefix("HERALD_KAFKA_") && !Self.keys.contains(key) {
            let closest = Self.keys.min { Self.editDistance($0, key) < Self.editDistance($1, key) }
            let hint = closest.map { Self.editDistance($0, key) <= 3 ? " (did you mean \($0)?)" : "" } ?? ""
            unknownKeys.append("\(key) is not a Herald configuration key\(hint)")
        }

        kafka = KafkaConfiguration(
            bootstrapServers: source["HERALD_KAFKA_BROKERS"] ?? "127.0.0.1:9092",
            properties: Self.librdkafkaProperties(source)
        )
        consumerGroup = source["HERALD_KAFKA_GROUP"] ?? "herald"

        var pipeline = PipelineConfiguration()
        pipeline.topics.requests = source["HERALD_TOPIC_REQUESTS"] ?? pipeline.topics.requests
        pipeline.topics.bulkRequests = source["HERALD_TOPIC_BULK_REQUESTS"] ?? pipeline.topics.bulkRequests
        pipeline.topics.tokens = source["HERALD_TOPIC_TOKENS"] ?? pipeline.topics.tokens
        pipeline.topics.results = source["HERALD_TOPIC_RESULTS"] ?? pipeline.topics.results
        pipeline.topics.unregistered = source["HERALD_TOPIC_UNREGISTERED"] ?? pipeline.topics.unregistered
        pipeline.topics.deadLetters = source["HERALD_TOPIC_DLQ"] ?? pipeline.topics.deadLetters
        pipeline.topics.channels = source["HERALD_TOPIC_CHANNELS"] ?? pipeline.topics.channels
        pipeline.topics.channelResults = source["HERALD_TOPIC_CHANNEL_RESULTS"] ?? pipeline.topics.channelResults
        pipeline.retry = RetryPolicy(
            maxAttempts: try source.integer("HERALD_RETRY_MAX_ATTEMPTS", default: 12, in: 1...1000),
            deliveryDeadline: .seconds(try source.integer("HERALD_DELIVERY_DEADLINE_S", default: 300, in: 1...86_400))
        )
        pipeline.maxConcurrentSends = try source.integer("HERALD_MAX_CONCURRENT_SENDS", default: pipeline.maxConcurrentSends, in: 1...100_000)
        pipeline.maxInFlightMessages = try source.integer("HERALD_MAX_IN_FLIGHT_MESSAGES", default: pipeline.maxInFlightMessages, in: 1...1_000_000)
        pipeline.pollBatchSize = try source.integer("HERALD_POLL_BATCH_SIZE", default: pipeline.pollBatchSize, in: 1...100_000)
        pipeline.maxOutcomesPerLedgerWrite = try source.integer("HERALD_LEDGER_BATCH_SIZE", default: pipeline.maxOutcomesPerLedgerWrite, in: 1...10_000)
        pipeline.derivesCollapseID = try source.boolean("HERALD_APNS_DERIVED_COLLAPSE_ID", default: false)
        pipeline.bulkMaxRate = try source.integer("HERALD_BULK_MAX_RATE", default: 0, in: 0...1_000_000)
        let housekeeping = try Self.housekeepingConfiguration(source)
        pipeline.ledgerRetention = housekeeping.ledgerRetention
        self.pipeline = pipeline

        postgresURL = try PostgresURL(source["HERALD_POSTGRES_URL"] ?? "postgres://localhost/herald")
        postgresPoolSize = try source.integer("HERALD_POSTGRES_POOL_SIZE", default: 20, in: 1...1000)
        self.housekeeping = housekeeping
        apns = try Self.apnsConfiguration(source, certificateProblems: &certificateProblems)
        let broadcastProduction = try Self.endpoint(source, "HERALD_APNS_BROADCAST_PRODUCTION_URL")
        let broadcastSandbox = try Self.endpoint(source, "HERALD_APNS_BROADCAST_SANDBOX_URL")
        if broadcastProduction != nil || broadcastSandbox != nil {
            broadcastEndpoints = (
                broadcastProduction ?? apns?.production ?? .production,
                broadcastSandbox ?? apns?.sandbox ?? .sandbox
            )
        }
        channelManagementEndpoints = (
            try Self.endpoint(source, "HERALD_APNS_CHANNELS_PRODUCTION_URL") ?? .channelManagementProduction,
            try Self.endpoint(source, "HERALD_APNS_CHANNELS_SANDBOX_URL") ?? .channelManagementSandbox
        )
        apnsCredentialsFile = source["HERALD_APNS_CREDENTIALS_FILE"]
        apnsCredentialsCheckInterval = .seconds(try source.integer("HERALD_APNS_CREDENTIALS_CHECK_S", default: 10, in: 1...86_400))
        shutdownGracePeriod = .seconds(try source.integer("HERALD_SHUTDOWN_GRACE_S", default: 20, in: 0...3600))
        httpPort = try source.integer("HERALD_HTTP_PORT", default: 8080, in: 0...65_535)
        let levelText = source["HERALD_LOG_LEVEL"] ?? "info"
        guard let level = Logger.Level(rawValue: levelText.lowercased()) else {
            throw ConfigurationError("HERALD_LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
        }
        logLevel = level
        guard let format = LogFormat(rawValue: (source["HERALD_LOG_FORMAT"] ?? "json").lowercased()) else {
            throw ConfigurationError("HERALD_LOG_FORMAT must be json or text")
        }
        logFormat = format
        migrateOnStart = try source.boolean("HERALD_MIGRATE_ON_START", default: false)
        let otlpEndpointSet = environment["OTEL_EXPORTER_OTLP_ENDPOINT"] != nil || environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != nil
        tracesEnabled = try source.boolean("HERALD_OTEL_TRACES", default: otlpEndpointSet)
        effectiveValues = source.effectiveValues
    }

    /// Variables that map to librdkafka properties: HERALD_KAFKA_SESSION_TIMEOUT_MS →
    /// session.timeout.ms. BROKERS and GROUP have their own meaning.
    private static func librdkafkaProperties(_ source: HeraldConfigurationSource) -> [String: String] {
        let prefix = "HERALD_KAFKA_"
        var properties: [String: String] = [:]
        for key in source.givenKeys where key.hasPrefix(prefix) {
            let name = key.dropFirst(prefix.count)
            guard name != "BROKERS", name != "GROUP", !name.isEmpty, let value = source[key] else { continue }
            properties[name.lowercased().replacingOccurrences(of: "_", with: ".")] = value
        }
        return properties
    }

    /// HERALD_TOKEN_PURGE_DAYS unset or 0 keeps unregistered tokens.
    private static func housekeepingConfiguration(_ source: HeraldConfigurationSource) throws -> HousekeepingConfiguration {
        var housekeeping = HousekeepingConfiguration()
        housekeeping.interval = .seconds(try source.integer("HERALD_HOUSEKEEPING_INTERVAL_S", default: 3600, in: 1...86_400))
        let ledgerHours = try source.integer("HERALD_LEDGER_RETENTION_HOURS", default: 168, in: 1...87_600)
        housekeeping.ledgerRetention = .seconds(ledgerHours * 3600)
        let purgeDays = try source.integer("HERALD_TOKEN_PURGE_DAYS", default: 0, in: 0...36_500)
        housekeeping.unregisteredTokenRetention = purgeDays == 0 ? nil : .seconds(purgeDays * 86_400)
        let tombstoneDays = try source.integer("HERALD_TOKEN_TOMBSTONE_DAYS", default: 30, in: 1...36_500)
        housekeeping.tombstoneRetention = .seconds(tombstoneDays * 86_400)
        return housekeeping
    }

    /// The APNs client's configuration: the HERALD_APNS_KEY_*/CERT_* credential for every topic,
    /// and the credentials of HERALD_APNS_CREDENTIALS_FILE for the apps it lists. Without the
    /// former, the file's credentials are all there is (events for any other topic are
    /// rejected). nil when no credential is configured at all.
    private static func apnsConfiguration(
        _ source: HeraldConfigurationSource,
        certificateProblems: inout [String]
    ) throws -> APNSClientConfiguration? {
        var fileCredentials: [String: APNSClientConfiguration.Authentication] = [:]
        if let path = source["HERALD_APNS_CREDENTIALS_FILE"] {
            (fileCredentials, certificateProblems) = try APNSCredentialsFile.loadReportingCertificates(path: path)
        }
        if let certificatePath = source["HERALD_APNS_CERT_PATH"], source["HERALD_APNS_KEY_PATH"] == nil {
            certificateProblems += APNSCredentialsFile.certificateProblemsOf(
                path: certificatePath,
                password: source["HERALD_APNS_CERT_PASSWORD"],
                name: "HERALD_APNS_CERT_PATH=\(certificatePath)",
                servedTopics: []
            )
        }
        let defaultAuthentication = try defaultCredential(source)
        guard defaultAuthentication != nil || !fileCredentials.isEmpty else { return nil }
        var configuration = APNSClientConfiguration(authentication: defaultAuthentication)
        configuration.credentialsByTopic = fileCredentials
        do {
            if let url = source["HERALD_APNS_PRODUCTION_URL"] {
                configuration.production = try .init(url: url)
            }
            if let url = source["HERALD_APNS_SANDBOX_URL"] {
                configuration.sandbox = try .init(url: url)
            }
        } catch {
            throw ConfigurationError("\(error)")
        }
        if let caPath = source["HERALD_APNS_CA_PATH"] {
            guard FileManager.default.isReadableFile(atPath: caPath) else {
                throw ConfigurationError("cannot read HERALD_APNS_CA_PATH=\(caPath)")
            }
            configuration.additionalTrustRootsPEMPath = caPath
        }
        if source["HERALD_APNS_CONNECTIONS"] != nil {
            configuration.connectionsPerEndpoint = try source.integer("HERALD_APNS_CONNECTIONS", default: 2, in: 1...64)
        }
        return configuration
    }

    /// The endpoint a `https://host[:port]` value of `key` names, if set.
    private static func endpoint(
        _ source: HeraldConfigurationSource,
        _ key: String
    ) throws -> APNSClientConfiguration.Endpoint? {
        guard let url = source[key] else { return nil }
        do {
            return try .init(url: url)
        } catch {
            throw ConfigurationError("\(key): \(error)")
        }
    }

    /// The HERALD_APNS_KEY_* (token) or HERALD_APNS_CERT_* (certificate: PKCS#12 with
    /// HERALD_APNS_CERT_PASSWORD, or PEM with its key in HERALD_APNS_CERT_KEY_PATH or in the same
    /// file) credential, if set.
    private static func defaultCredential(_ source: HeraldConfigurationSource) throws -> APNSClientConfiguration.Authentication? {
        if let keyPath = source["HERALD_APNS_KEY_PATH"] {
            guard let keyID = source["HERALD_APNS_KEY_ID"], let teamID = source["HERALD_APNS_TEAM_ID"] else {
                throw ConfigurationError("HERALD_APNS_KEY_PATH needs HERALD_APNS_KEY_ID and HERALD_APNS_TEAM_ID")
            }
            return try APNSCredentialsFile.tokenCredential(
                keyPath: keyPath,
                keyID: keyID,
                teamID: teamID,
                names: (key: "HERALD_APNS_KEY_PATH", keyID: "HERALD_APNS_KEY_ID", teamID: "HERALD_APNS_TEAM_ID")
            )
        }
        if let certificatePath = source["HERALD_APNS_CERT_PATH"] {
            return try APNSCredentialsFile.certificateCredential(
                path: certificatePath,
                keyPath: source["HERALD_APNS_CERT_KEY_PATH"],
                password: source["HERALD_APNS_CERT_PASSWORD"],
                names: (certificate: "HERALD_APNS_CERT_PATH", key: "HERALD_APNS_CERT_KEY_PATH")
            )
        }
        return nil
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
    /// An integer in `range`, `defaultValue` when unset.
    func integer(_ key: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = self[key] else { return defaultValue }
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError("\(key) must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// `true`/`yes`/`1` or `false`/`no`/`0`, `defaultValue` when unset.
    func boolean(_ key: String, default defaultValue: Bool) throws -> Bool {
        guard let text = self[key]?.lowercased() else { return defaultValue }
        switch text {
        case "1", "true", "yes": return true
        case "0", "false", "no": return false
        default: throw ConfigurationError("\(key) must be true or false")
        }
    }
}
