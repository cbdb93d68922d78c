package import APNSHTTP2
import ConfigReading
import Configuration
package import FCMHTTP
package import WebPushHTTP
package import PostgresStores
import Foundation
package import KafkaTransport
package import Logging
package import PushPipeline

/// Everything `herald` is configured with, read from HERALD_* variables (docs/configuration.md)
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
    /// Web push's settings and VAPID keys (HERALD_WEBPUSH_* and the credentials file's web push
    /// entries); nil when no VAPID key is configured (no web push client is built, and browsers
    /// get rejected results, NoCredentialForApp).
    package var webPush: WebPushClientConfiguration?
    /// HERALD_CREDENTIALS_FILE: credentials per app for every platform, re-read on SIGHUP and
    /// every ``credentialsCheckInterval``.
    package var credentialsFile: String?
    /// How often the credentials file is checked for changes (HERALD_CREDENTIALS_CHECK_S).
    package var credentialsCheckInterval: Duration
    package var shutdownGracePeriod: Duration
    package var httpPort: Int
    package var logLevel: Logger.Level
    package var logFormat: LogFormat
    /// Whether `herald run` applies migrations before it starts consuming.
    package var migrateOnStart: Bool
    /// The commit the running build was made from (HERALD_BUILD_REVISION, which the image sets
    /// from its REVISION build argument; `unknown` otherwise), exported as `herald_build_info`.
    package var buildRevision: String
    /// Whether events and sends are traced and exported over OTLP/HTTP (HERALD_OTEL_TRACES;
    /// default: on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set).
    /// The exporter reads the standard OTEL_* variables.
    package var tracesEnabled: Bool

    package enum LogFormat: String, Sendable {
        case json
        case text
    }

    /// The service's own keys, relative to the reader (scoped to `herald`: `postgres.url` is
    /// HERALD_POSTGRES_URL); the database URL is read as a secret (it may hold a password).
    static let configKeys: [ConfigKey] = [
        ["postgres", "url"], ["postgres", "url_file"], ["postgres", "pool_size"], ["shutdown_grace_s"], ["http_port"],
        ["otel_traces"], ["log_level"], ["log_format"], ["migrate_on_start"], ["build_revision"], CredentialsFileKey.path, CredentialsFileKey.checkInterval,
        CredentialsFileKey.formerPath, CredentialsFileKey.formerCheckInterval,
    ]
    /// The database when neither HERALD_POSTGRES_URL nor HERALD_POSTGRES_URL_FILE is set.
    static let defaultPostgresURL = "postgres://localhost/herald"
    /// The drain time on SIGTERM when HERALD_SHUTDOWN_GRACE_S is unset.
    static let defaultShutdownGracePeriod: Duration = .seconds(20)
    /// The port of /metrics and the health checks when HERALD_HTTP_PORT is unset.
    static let defaultHTTPPort = 8080
    /// The log level when HERALD_LOG_LEVEL is unset.
    static let defaultLogLevel = Logger.Level.info
    /// The log lines' format when HERALD_LOG_FORMAT is unset.
    static let defaultLogFormat = LogFormat.json
    /// Whether `herald run` applies migrations when HERALD_MIGRATE_ON_START is unset.
    static let defaultMigrateOnStart = false

    /// Every HERALD_* key Herald reads, as docs/configuration.md lists them: each
    /// component's configuration type declares the keys it reads, beside the code that reads
    /// them; other HERALD_KAFKA_* keys pass through to librdkafka.
    package static let keys = Set(
        [
            HeraldConfigurationSource.configKeys, configKeys, KafkaConfiguration.configKeys, PipelineConfiguration.configKeys,
            HousekeepingConfiguration.configKeys, APNSClientConfiguration.configKeys, FCMClientConfiguration.configKeys,
            WebPushClientConfiguration.configKeys,
        ].joined().map(\.environmentName)
    )

    /// The keys Herald reads that other software defines (Google's Application Default
    /// Credentials), documented beside the HERALD_* ones.
    package static let foreignKeys: Set<String> = [FCMClientConfiguration.applicationCredentialsVariable]

    /// Reads the configuration. A value in `environment` wins over the same key in the YAML or
    /// JSON file named by HERALD_CONFIG_FILE.
    package init(environment: [String: String]) async throws {
        self = try await Self.read(environment: environment).configuration
    }

    /// Reads the configuration as ``init(environment:)`` does, and reports what the reading
    /// found besides: the keys Herald does not know, certificate problems, the values set and
    /// the defaults applied.
    package static func read(environment: [String: String]) async throws -> (configuration: Self, report: ConfigurationReport) {
        let source = try await HeraldConfigurationSource(environment: environment)
        var certificateProblems: [String] = []
        let configuration: Self
        do {
            configuration = try Self(reading: source, environment: environment, certificateProblems: &certificateProblems)
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError("\(error)")
        }
        let report = ConfigurationReport(
            unknownKeys: source.unknownKeys(known: keys),
            certificateProblems: certificateProblems,
            effectiveValues: source.effectiveValues,
            defaultsApplied: source.defaultsApplied,
            keysRead: source.keysRead
        )
        return (configuration, report)
    }

    /// Reads every component's configuration through `source`'s reader, in the order of
    /// docs/configuration.md's table; the environment gives the OTEL_* variables that turn tracing on.
    private init(reading source: HeraldConfigurationSource, environment: [String: String], certificateProblems: inout [String]) throws {
        let config = source.herald
        kafka = try KafkaConfiguration(reading: config, givenKeys: source.givenKeys)
        consumerGroup = KafkaConfiguration.consumerGroup(reading: config)
        housekeeping = try HousekeepingConfiguration(reading: config)
        pipeline = try PipelineConfiguration(reading: config, ledgerRetention: housekeeping.ledgerRetention)
        let postgresURLKey: ConfigKey = ["postgres", "url"]
        let postgresURLFileKey: ConfigKey = ["postgres", "url_file"]
        if let path = config.string(forKey: postgresURLFileKey) {
            guard config.string(forKey: postgresURLKey, isSecret: true) == nil else {
                throw ConfigurationError("set HERALD_POSTGRES_URL or HERALD_POSTGRES_URL_FILE, not both")
            }
            postgresURL = try PostgresURL(SecretFile.read(path, for: postgresURLFileKey))
        } else {
            postgresURL = try PostgresURL(config.string(forKey: postgresURLKey, isSecret: true, default: Self.defaultPostgresURL))
        }
        postgresPoolSize = try config.int(forKey: ["postgres", "pool_size"], default: PostgresURL.defaultPoolSize, in: 1...1000)
        credentialsFile = try Self.credentialsFile(reading: config)
        credentialsCheckInterval = try Self.credentialsCheckInterval(reading: config)
        let apnsSettings = try APNSClientConfiguration.Settings(reading: config, credentialsFile: credentialsFile)
        apns = apnsSettings.client
        certificateProblems = apnsSettings.certificateProblems
        broadcastEndpoints = apnsSettings.broadcastEndpoints
        channelManagementEndpoints = apnsSettings.channelManagementEndpoints
        let fcmEntries = try credentialsFile.map(CredentialsFile.fcmEntries(path:)) ?? []
        fcm = try FCMClientConfiguration(reading: config, applicationDefault: source.unscoped, entries: fcmEntries)
        let webPushEntries = try credentialsFile.map(CredentialsFile.webPushEntries(path:)) ?? []
        webPush = try WebPushClientConfiguration(reading: config, entries: webPushEntries, allowList: pipeline.webPushHosts)
        shutdownGracePeriod = try config.duration(
            forKey: ["shutdown_grace_s"],
            unit: .seconds(1),
            default: Self.defaultShutdownGracePeriod,
            in: 0...3600
        )
        httpPort = try config.int(forKey: ["http_port"], default: Self.defaultHTTPPort, in: 0...65_535)
        let levelText = config.string(forKey: ["log_level"], default: Self.defaultLogLevel.rawValue)
        guard let level = Logger.Level(rawValue: levelText.lowercased()) else {
            throw ConfigurationError("HERALD_LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
        }
        logLevel = level
        guard let format = LogFormat(rawValue: config.string(forKey: ["log_format"], default: Self.defaultLogFormat.rawValue).lowercased()) else {
            throw ConfigurationError("HERALD_LOG_FORMAT must be json or text")
        }
        logFormat = format
        migrateOnStart = try config.flag(forKey: ["migrate_on_start"], default: Self.defaultMigrateOnStart)
        buildRevision = config.string(forKey: ["build_revision"], default: "unknown")
        let otlpEndpointSet = environment["OTEL_EXPORTER_OTLP_ENDPOINT"] != nil || environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != nil
        tracesEnabled = try config.flag(forKey: ["otel_traces"], default: otlpEndpointSet)
    }
}

/// What reading the configuration found besides the configuration itself, kept apart from it:
/// `herald` reports the unknown keys and certificate problems at start-up, and `herald config
/// check` prints all of it.
package struct ConfigurationReport: Sendable {
    /// HERALD_* keys given that Herald does not read, each with the closest known key when one
    /// is near, so a typo is not silently ignored.
    package var unknownKeys: [String]
    /// APNs certificates that expired, expire within 30 days, or were not issued for a bundle
    /// ID they are configured for.
    package var certificateProblems: [String]
    /// Every key read that has a value, as `KEY = [type: value] (source)`; secrets show as
    /// `<REDACTED>` (swift-configuration's redaction).
    package var effectiveValues: [String]
    /// The keys left unset that Herald applied a default to, with that default, as text; the
    /// table in docs/configuration.md is checked against them.
    package var defaultsApplied: [String: String]
    /// Every key the reads looked up, given or not, by environment name: a test checks that
    /// each is declared by its component's configuration type.
    package var keysRead: Set<String>
}

/// A configuration problem, worded as the one line `herald` prints before exiting with code 2.
package struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}

/// The credentials file's keys. Their names before FCM served from the file too
/// (HERALD_CREDENTIALS_FILE, HERALD_CREDENTIALS_CHECK_S) keep working.
enum CredentialsFileKey {
    static let path: ConfigKey = ["credentials_file"]
    static let checkInterval: ConfigKey = ["credentials_check_s"]
    static let formerPath: ConfigKey = ["apns", "credentials_file"]
    static let formerCheckInterval: ConfigKey = ["apns", "credentials_check_s"]
}

extension HeraldConfiguration {
    /// How often the credentials file is checked for changes when HERALD_CREDENTIALS_CHECK_S is unset.
    static let defaultCredentialsCheckInterval: Duration = .seconds(10)

    /// HERALD_CREDENTIALS_FILE, or its former name; both set differently is a mistake.
    static func credentialsFile(reading config: ConfigReader) throws -> String? {
        let path = config.string(forKey: CredentialsFileKey.path)
        let former = config.string(forKey: CredentialsFileKey.formerPath)
        if let path, let former, path != former {
            throw ConfigurationError("HERALD_CREDENTIALS_FILE and HERALD_CREDENTIALS_FILE (its former name) name different files; set one")
        }
        return path ?? former
    }

    /// HERALD_CREDENTIALS_CHECK_S, or its former name when only that is set.
    static func credentialsCheckInterval(reading config: ConfigReader) throws -> Duration {
        let givenUnderFormerName =
            config.string(forKey: CredentialsFileKey.checkInterval) == nil
            && config.string(forKey: CredentialsFileKey.formerCheckInterval) != nil
        return try config.duration(
            forKey: givenUnderFormerName ? CredentialsFileKey.formerCheckInterval : CredentialsFileKey.checkInterval,
            unit: .seconds(1),
            default: defaultCredentialsCheckInterval,
            in: 1...86_400
        )
    }
}
