import KafkaMessages
import APNSCore
import APNSHTTP2
import ArgumentParser
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PushPipeline

/// What the steps of one shape after its set-up share: its names, workspace, workload and urgent alerts.
struct ShapeSetUp {
    let shape: PipelineShape
    /// The prefix of the shape's topics, consumer groups and kept logs (`hb<8 hex digits>`).
    let tag: String
    /// `<tag>.push.` requests, tokens, results, unregistered, dlq, channels, channel-results, requests.bulk.
    let topics: [String]
    let workspace: Workspace
    let workload: Workload
    /// The campaign shape's urgent alerts; nil for a burst or an open load.
    let urgent: UrgentLoad?
}

/// The steps of one shape (`runShape`) between its set-up and its figures.
extension PipelineBenchmark {
    /// mock-webpush with herald's HERALD_WEBPUSH_* environment and the seconds its subscriptions took.
    typealias BrowserMock = (mock: MockWebPushProcess, environment: [String: String], seconds: Double)

    /// Loads the workload's device tokens into push.device_tokens (with ANALYZE when `analyze`),
    /// then prints the shape's heading: the workload, the load's time and the browser subscriptions.
    func loadTokens(of setUp: ShapeSetUp, analyze: Bool, browsers: BrowserMock?, services: BenchServices, logger: Logger) async throws {
        let (shape, tag, workload) = (setUp.shape, setUp.tag, setUp.workload)
        let loadStart = ContinuousClock.now
        try await services.withPostgres(logger: logger) { try await workload.load(into: $0, analyze: analyze, logger: logger) }
        let loadSeconds = (ContinuousClock.now - loadStart).inSeconds
        let subscriptionsMade = browsers.map {
            "; \(workload.webPushTokenCount) browser subscriptions made on \($0.mock.origins.joined(separator: " ")) in \(fixed($0.seconds, 1)) s"
        }
        print(
            """

            == shape \(shape) (\(shape.summary); 1-3 devices per user), topics \(tag).push.*
            \(workload.eventCount) events, \(workload.userCount) users, \(workload.tokens.count) notifications (\(workload.fcmTokenCount) to Android devices, \(workload.webPushTokenCount) to browsers); \
            tokens loaded \(analyze ? "with" : "without") ANALYZE in \(fixed(loadSeconds, 1)) s\(subscriptionsMade ?? "")
            """
        )
    }

    /// Herald's environment for one shape: its topics and consumer group, the database, the
    /// mocks' endpoints and credentials, then --herald-env (which wins).
    func heraldEnvironment(
        for setUp: ShapeSetUp,
        services: BenchServices,
        mock: MockAPNSProcess,
        fcmMock: MockFCMProcess?,
        browserEnvironment: [String: String]
    ) -> [String: String] {
        let (tag, topics, workspace) = (setUp.tag, setUp.topics, setUp.workspace)
        var environment = [
            "HERALD_KAFKA_BROKERS": services.brokers, "HERALD_KAFKA_GROUP": "\(tag).herald",
            "HERALD_TOPIC_REQUESTS": topics[0], "HERALD_TOPIC_TOKENS": topics[1], "HERALD_TOPIC_RESULTS": topics[2],
            "HERALD_TOPIC_UNREGISTERED": topics[3], "HERALD_TOPIC_DLQ": topics[4],
            "HERALD_TOPIC_CHANNELS": topics[5], "HERALD_TOPIC_CHANNEL_RESULTS": topics[6], "HERALD_TOPIC_BULK_REQUESTS": topics[7],
            "HERALD_POSTGRES_URL": services.postgresURL,
            // MockAPNSProcess.start wrote the provider key (PEM of credentials.privateKey) here.
            "HERALD_APNS_KEY_PATH": workspace.path("AuthKey.p8"),
            "HERALD_APNS_KEY_ID": mock.credentials.keyID, "HERALD_APNS_TEAM_ID": mock.credentials.teamID,
            "HERALD_APNS_PRODUCTION_URL": "https://127.0.0.1:\(mock.port)", "HERALD_APNS_SANDBOX_URL": "https://127.0.0.1:\(mock.port)",
            "HERALD_APNS_CA_PATH": mock.caPath,
            "HERALD_LOG_LEVEL": "warning", "HERALD_LOG_FORMAT": "text", "HERALD_KAFKA_SESSION_TIMEOUT_MS": "6000",
        ]
        if let fcmMock {
            environment["HERALD_FCM_URL"] = "https://127.0.0.1:\(fcmMock.port)"
            environment["HERALD_FCM_CA_PATH"] = fcmMock.caPath
            environment["HERALD_FCM_SERVICE_ACCOUNT_PATH"] = fcmMock.accountPath
        }
        environment.merge(browserEnvironment) { _, browser in browser }
        for entry in heraldEnv {
            let parts = entry.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            environment[String(parts[0])] = String(parts[1])
        }
        return environment
    }

    /// Reads Herald's configuration from `environment` as herald will and prints the settings the
    /// figures depend on; returns the pipeline's settings and the APNs connections per endpoint.
    func heraldSettings(from environment: [String: String]) async throws -> (pipeline: PipelineConfiguration, connections: Int) {
        let configuration = try await HeraldConfiguration(environment: environment)
        let (pipeline, connections) = (configuration.pipeline, configuration.apns?.connectionsPerEndpoint ?? 2)
        print(
            "herald: \(connections) APNs connections, \(pipeline.maxConcurrentSends) concurrent sends, "
                + "\(pipeline.maxInFlightMessages) in-flight messages, poll batch \(pipeline.pollBatchSize), ledger batch \(pipeline.maxOutcomesPerLedgerWrite)"
        )
        return (pipeline, connections)
    }

    /// Starts the herald instances, measures them (`measure`), stops them and deletes the
    /// workload's tokens; returns the run and the autovacuum runs per table meanwhile. On a
    /// failure it deletes the tokens too, keeps the herald logs in .local/bench, kills the
    /// instances still running and rethrows.
    func runHeralds(
        _ setUp: ShapeSetUp,
        environment: [String: String],
        rate: Int,
        mockPIDs: (apns: Int32, fcm: Int32?, webPush: Int32?),
        services: BenchServices,
        logger: Logger
    ) async throws -> (run: PipelineRun, autovacuumRuns: [String: Int]) {
        let workload = setUp.workload
        var heralds: [HeraldChild] = []
        defer { for herald in heralds { herald.killIfRunning() } }
        let autovacuumBefore = try await services.autovacuumCounts(logger: logger)
        do {
            for index in 0..<instances {
                heralds.append(
                    try HeraldChild(
                        executable: herald ?? Workspace.siblingExecutable("herald"),
                        environment: environment,
                        logPath: setUp.workspace.path("herald-\(index).log")
                    )
                )
            }
            for child in heralds { try await child.waitUntilReady() }
            let run = try await measure(
                workload, rate: rate, topics: setUp.topics, urgent: setUp.urgent, heralds: heralds, mockPID: mockPIDs.apns,
                fcmMockPID: mockPIDs.fcm, webPushMockPID: mockPIDs.webPush, services: services, logger: logger)
            for child in heralds {
                let status = try await child.stop()
                guard status == 0 else { throw BenchFailure("herald (pid \(child.pid)) exited with \(status) after SIGTERM") }
            }
            var autovacuumRuns: [String: Int] = [:]
            for (key, count) in try await services.autovacuumCounts(logger: logger) where count != autovacuumBefore[key] {
                autovacuumRuns[key] = count - (autovacuumBefore[key] ?? 0)
            }
            try await services.withPostgres(logger: logger) { try await workload.delete(from: $0, logger: logger) }
            return (run, autovacuumRuns)
        } catch {
            try? await services.withPostgres(logger: logger) { try await workload.delete(from: $0, logger: logger) }
            try? FileManager.default.createDirectory(atPath: ".local/bench", withIntermediateDirectories: true)
            for (index, child) in heralds.enumerated() {
                let kept = ".local/bench/\(setUp.tag)-herald-\(index).log"
                try? FileManager.default.copyItem(atPath: child.logPath, toPath: kept)
                print("herald log kept: \(kept)")
            }
            throw error
        }
    }

    /// Prints the shape's figures (autovacuum, the run beside the sender alone and the broker
    /// alone, the urgent alerts' latency) and checks them and the mocks' counters; returns the
    /// throughput (notifications/s), or throws what failed.
    func reportShape(
        _ setUp: ShapeSetUp,
        measured: (run: PipelineRun, autovacuumRuns: [String: Int]),
        sender: (run: ClientRun, sent: Int),
        settings: (pipeline: PipelineConfiguration, connections: Int),
        mockSummaries: (apns: String, fcm: String?, webPush: String?),
        brokerRate: Double,
        plotPath: String
    ) throws -> Double {
        let (shape, run, workload, urgent) = (setUp.shape, measured.run, setUp.workload, setUp.urgent)
        let (pipeline, connections) = settings
        let runs = measured.autovacuumRuns.sorted { $0.key < $1.key }.map { "\($0.key) +\($0.value)" }
        print("postgres autovacuum while herald ran: \(runs.isEmpty ? "none" : runs.joined(separator: ", "))")
        let senderLine =
            "sender alone (same mock, \(connections) connections, \(pipeline.maxConcurrentSends) in flight): \(fixed(sender.run.requestsPerSecond)) requests/s, \(fixed(sender.run.cpuMicrosecondsPerRequest, 1)) CPU µs/request"
        let failures =
            report(run, shape: shape, workload: workload, sender: sender.run, senderLine: senderLine, brokerRate: brokerRate, plotPath: plotPath)
            + mockFailures(
                mockSummaries.apns,
                expected: workload.tokens.count - workload.fcmTokenCount - workload.webPushTokenCount + sender.sent + (urgent?.progress.results ?? 0))
            + deliveredFailures(of: "mock-fcm", summary: mockSummaries.fcm, expected: workload.fcmTokenCount)
            + deliveredFailures(of: "mock-webpush", summary: mockSummaries.webPush, expected: workload.webPushTokenCount)
        if let urgent {
            let (idle, during) = (urgent.summary(.idle), urgent.summary(.campaign))
            print(
                """
                urgent alerts (\(urgent.perSecond)/s, produce -> first result): idle herald \(idle.text); during the campaign \(during.text); \
                p99 during / idle \(fixed(Double(during.p99) / Double(max(1, idle.p99)), 2))
                """
            )
        }
        guard failures.isEmpty else { throw BenchFailure("FAILED (shape \(shape)): " + failures.joined(separator: "; ")) }
        return run.throughput
    }
}
