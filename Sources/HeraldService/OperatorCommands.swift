import JSONCore
import PushCore
import PostgresStores
import KafkaMessages
import APNSCore
import APNSHTTP2
import FCMCore
import FCMHTTP
import WebPushCore
import WebPushHTTP
import Foundation
import PushStores
import KafkaTransport
package import Logging
package import PushPipeline

/// What `herald config check`, `herald token` and `herald send` do, on the configuration
/// `herald run` reads.
package enum OperatorCommands {
    /// The effective configuration, one `name: value` line each, then from `report` every value
    /// set and where it came from, every default applied to a key left unset, and the warnings;
    /// secrets (the database URL, the certificate password, librdkafka's passwords and keys)
    /// show as `<REDACTED>`.
    package static func describe(_ configuration: HeraldConfiguration, report: ConfigurationReport) -> [String] {
        let pipeline = configuration.pipeline
        let topics = pipeline.topics
        var lines = [
            "kafka brokers: \(configuration.kafka.bootstrapServers)",
            "kafka groups: \(configuration.consumerGroup) (urgent lane), \(configuration.bulkConsumerGroup) (bulk lane)",
            "kafka properties set: \(configuration.kafka.properties.keys.sorted().joined(separator: ", ").nonEmpty ?? "none") (values not shown)",
            "topics: requests \(topics.requests), tokens \(topics.tokens), results \(topics.results), unregistered \(topics.unregistered), dead letters \(topics.deadLetters), channels \(topics.channels), channel results \(topics.channelResults)",
            "postgres: \(configuration.postgresURL) sslmode \(configuration.postgresURL.sslMode.rawValue), pool \(configuration.postgresPoolSize)",
        ]
        if let apns = configuration.apns {
            lines.append("apns default credential: \(apns.authentication?.description ?? "none (only the credentials file's apps are served)")")
            for (topic, credential) in apns.credentialsByTopic.sorted(by: { $0.key < $1.key }) {
                lines.append("apns credential for \(topic): \(credential)")
            }
            lines.append("apns endpoints: production \(apns.production), sandbox \(apns.sandbox), \(apns.connectionsPerEndpoint) connections each")
            let broadcast = configuration.broadcastEndpoints ?? (apns.production, apns.sandbox)
            lines.append("apns broadcast endpoints: production \(broadcast.production), sandbox \(broadcast.sandbox)")
            let channels = configuration.channelManagementEndpoints
            lines.append("apns channel management endpoints: production \(channels.production), sandbox \(channels.sandbox)")
        } else {
            lines.append("apns: no credential (only `herald migrate` can run)")
        }
        lines += describeFCM(configuration.fcm)
        lines += describeWebPush(configuration.webPush, allowList: pipeline.webPushHosts)
        lines += [
            "windows: \(pipeline.maxInFlightMessages) messages, \(pipeline.maxConcurrentSends) sends, poll batch \(pipeline.pollBatchSize), ledger batch \(pipeline.maxOutcomesPerLedgerWrite)",
            "retries: \(pipeline.retry.maxAttempts) attempts within \(pipeline.retry.deliveryDeadline)",
            "derived collapse id: \(pipeline.derivesCollapseID)",
            "housekeeping: every \(configuration.housekeeping.interval), ledger kept \(configuration.housekeeping.ledgerRetention)",
            "http port: \(configuration.httpPort), log \(configuration.logLevel) \(configuration.logFormat.rawValue), tracing \(configuration.tracesEnabled ? "on" : "off")",
            "migrate on start: \(configuration.migrateOnStart), shutdown grace \(configuration.shutdownGracePeriod)",
        ]
        let defaults = report.defaultsApplied.sorted { $0.key < $1.key }.map { "default: \($0.key) = \($0.value)" }
        return lines + report.effectiveValues.map { "set: \($0)" } + defaults + report.unknownKeys.map { "warning: \($0)" }
            + report.certificateProblems.map { "warning: \($0)" }
    }

    /// FCM's lines: the endpoint, the trust roots and each service account (its project, e-mail
    /// and key ID prefix, never the key).
    static func describeFCM(_ fcm: FCMClientConfiguration?) -> [String] {
        guard let fcm else { return ["fcm: no credential (Android devices get rejected results, NoCredentialForPackage)"] }
        var lines = ["fcm endpoint: \(fcm.baseURL), trust roots \(fcm.additionalTrustRootsPEMPath ?? "system")"]
        lines.append("fcm default credential: \(fcm.credentials.fallback?.description ?? "none (only the credentials file's packages are served)")")
        for entry in fcm.credentials.entries {
            lines.append("fcm credential for \(entry.packages.joined(separator: ", ")): \(entry.serviceAccount)")
        }
        return lines
    }

    static func describeWebPush(_ webPush: WebPushClientConfiguration?, allowList: WebPushHostAllowList) -> [String] {
        var lines = ["webpush allowed hosts: \(allowList.entries.joined(separator: ", "))"]
        guard let webPush else { return lines + ["webpush: no VAPID key (browsers get rejected results, NoCredentialForApp)"] }
        lines.append("webpush trust roots: \(webPush.additionalTrustRootsPEMPath ?? "system"), \(webPush.connectionsPerOrigin) connections per origin")
        func describe(_ entry: WebPushCredentials.Entry) -> String {
            "VAPID key \(entry.current.publicKeyText.prefix(12))…, subject \(entry.current.subject), \(entry.previous.count) previous key(s)"
        }
        lines.append("webpush default credential: \(webPush.credentials.fallback.map(describe) ?? "none (only the credentials file's apps are served)")")
        for entry in webPush.credentials.entries {
            lines.append("webpush credential for \(entry.apps.joined(separator: ", ")): \(describe(entry))")
        }
        return lines
    }

    /// Publishes a registry update to push.tokens; returns the line saying what was published.
    package static func publishTokenUpdate(
        register: Bool,
        user: String?,
        token: String,
        topic: String,
        environment: String,
        platform: String = "apns",
        fcmTarget: String? = nil,
        configuration: HeraldConfiguration,
        logger: Logger
    ) async throws -> String {
        var fields = [
            ("action", register ? "register" : "unregister"), ("token", token), ("topic", topic),
            ("timestamp", RFC3339.format(milliseconds: WallClock.millisecondsSince1970())), ("platform", platform),
        ]
        if let user { fields.append(("user_id", user)) }
        if register { fields.append(("environment", environment)) }
        if let fcmTarget { fields.append(("fcm_target", fcmTarget)) }
        let value = JSONValue.object(fields.map { .init($0.0, .string($0.1)) }).serialized()
        // The registry's own parser: what Herald would dead-letter is refused here.
        _ = try TokenRegistryUpdate(json: value)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: logger)
        try await withProducer(producer) {
            try await producer.send(KafkaOutgoingMessage(topic: configuration.pipeline.topics.tokens, key: Array(token.utf8), value: value))
        }
        let who = user.map { " of user \($0)" } ?? ""
        return "published \(register ? "register" : "unregister") of \(platform) token \(DeviceTokenText.redacted(token))\(who) for \(topic)"
            + (register ? " (\(environment))" : "") + " to \(configuration.pipeline.topics.tokens)"
    }

    /// Publishes a test alert to push.requests and returns a line per result that arrives on
    /// push.results within `timeout` (results keep coming for a second after the last).
    package static func sendTestAlert(
        user: String,
        topic: String?,
        package: String? = nil,
        alert: String,
        timeout: Duration,
        configuration: HeraldConfiguration,
        logger: Logger
    ) async throws -> [String] {
        let eventID = "herald-send-\(UUID().uuidString.lowercased())"
        var fields: [JSONValue.Member] = [.init("id", .string(eventID)), .init("user_ids", .array([.string(user)]))]
        if let topic {
            fields += [.init("topic", .string(topic)), .init("payload", .object([.init("aps", .object([.init("alert", .string(alert))]))]))]
        }
        if let package {
            let message = JSONValue.object([.init("notification", .object([.init("title", .string("Herald")), .init("body", .string(alert))]))])
            fields.append(.init("fcm", .object([.init("package", .string(package)), .init("message", message)])))
        }
        let event = JSONValue.object(fields).serialized()
        _ = try NotificationEvent(json: event)
        // Read only what comes after joining: a fresh group from the end of push.results.
        var readerConfiguration = configuration.kafka
        readerConfiguration.properties["auto.offset.reset"] = "latest"
        let reader = try KafkaConsumer(
            configuration: readerConfiguration,
            groupID: "herald-send-\(UUID().uuidString.lowercased())",
            topics: [configuration.pipeline.topics.results],
            logger: logger
        )
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: logger)
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        return try await withProducer(producer) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await reader.run() }
                defer { group.cancelAll() }
                while !reader.hasJoinedGroup, clock.now < deadline {
                    _ = try await reader.poll(maxMessages: 100, timeout: .milliseconds(100))
                }
                try await producer.send(KafkaOutgoingMessage(topic: configuration.pipeline.topics.requests, key: Array(eventID.utf8), value: event))
                let apps = [topic, package].compactMap { $0 }.joined(separator: " and ")
                var lines = ["published event \(eventID) for user \(user) of \(apps) to \(configuration.pipeline.topics.requests)"]
                var quietSince: ContinuousClock.Instant?
                while clock.now < deadline, quietSince.map({ $0.duration(to: clock.now) < .seconds(1) }) ?? true {
                    for message in try await reader.poll(maxMessages: 100, timeout: .milliseconds(100)) {
                        guard let value = message.value, let result = try? JSONParser.parse(value),
                            result["event_id"] == .string(eventID)
                        else { continue }
                        lines.append(describe(result: result))
                        quietSince = clock.now
                    }
                }
                if lines.count == 1 { lines.append("no result within \(timeout)") }
                return lines
            }
        }
    }

    /// Performs one channel management command directly against the channel management API
    /// (HERALD_APNS_CHANNELS_*_URL) with the configured credentials, and returns its answer as
    /// the push.channel-results JSON. Throws ``ConfigurationError`` when no credential is configured.
    package static func manageChannel(
        _ command: ChannelCommand,
        configuration: HeraldConfiguration,
        logger: Logger
    ) async throws -> ChannelCommandResult {
        guard var clientConfiguration = configuration.apns else {
            throw ConfigurationError("no APNs credential: set HERALD_APNS_KEY_* or HERALD_CREDENTIALS_FILE")
        }
        (clientConfiguration.production, clientConfiguration.sandbox) = configuration.channelManagementEndpoints
        let client = try APNSHTTP2Client(configuration: clientConfiguration, logger: logger)
        let manager = ChannelManager(client: client, policy: configuration.pipeline.retry)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await client.run() }
            defer { group.cancelAll() }
            return try await manager.perform(command)
        }
    }

    /// One push.results record in a line: status, device, APNs' answer.
    private static func describe(result: JSONValue) -> String {
        func text(_ key: String) -> String? {
            switch result[key] {
            case .string(let value): value
            case .number(let value): value
            default: nil
            }
        }
        let device = text("token").map { "token \(DeviceTokenText.redacted($0)) (\(text("environment") ?? "?"))" } ?? "no device"
        var line = "\(text("status") ?? "?"): \(device)"
        if let status = text("apns_status") { line += ", APNs \(status)" }
        if let reason = text("reason") { line += " \(reason)" }
        if let apnsID = text("apns_id") { line += ", apns-id \(apnsID)" }
        return line + ", \(text("attempts") ?? "?") attempts, \(text("latency_ms") ?? "?") ms"
    }

    /// Runs `body` with `producer` running, then flushes and closes it.
    private static func withProducer<Result: Sendable>(
        _ producer: KafkaProducer,
        _ body: () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }
}

extension String {
    fileprivate var nonEmpty: String? { isEmpty ? nil : self }
}
