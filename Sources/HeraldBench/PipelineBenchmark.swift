import KafkaMessages
import APNSCore
import APNSHTTP2
import ArgumentParser
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PushPipeline
import Crypto
import WebPushCore

// `herald-bench pipeline` measures the real `herald run` executable end to end on the local
// services: Tansu (behind its ApiVersions proxy) and PostgreSQL from scripts/services.sh, and a
// mock-apns child (and a mock-fcm and a mock-webpush one with Android devices and browser
// subscriptions, --android-share and --browser-share). Per shape of workload it creates fresh topics, bulk-loads the device tokens
// into push.device_tokens, starts Herald, produces every event as fast as the broker takes them
// and reads push.results until every (event, device) has exactly one result. It reports
// notifications/s from the first produce to the last result's timestamp, produce-to-result
// latency, Herald's CPU and memory, and the CPU of PostgreSQL, the broker, the mock and the
// machine over the same window, beside two baselines of the same run: Herald's sender alone
// against the same mock, and the broker alone (produce + consume). A missing, failed or
// twice-pushed notification fails it.
// About 540 lines: one command's steps (set-up, load, run, read back, report) in their order.

/// `herald-bench pipeline`: see the comment above.
struct PipelineBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline",
        abstract: "The real herald executable end to end: notifications/s, latency, CPU and memory per workload shape.",
        discussion: """
            Needs the local services: scripts/services.sh start; source .local/run/services.env. \
            Shapes: single (one user per event), fanout (1,000 users per event), mixed (90 % \
            single, 10 % 100 users); users have 1 to 3 devices. Each shape gets its own topics, \
            consumer groups, app bundle ID and mock-apns. Exits non-zero if a notification is \
            missing, was not delivered or was pushed twice.
            """
    )

    @Option(help: "single, fanout, mixed or all.") var shape = "all"
    @Option(help: "Notifications per shape (about; whole events).") var notifications = 100_000
    @Flag(help: "1,000,000 notifications per shape.") var full = false
    @Option(help: "Partitions of every topic.") var partitions = 12
    @Flag(help: "ANALYZE push.device_tokens after loading the tokens (default: not, like an app API's bulk load).")
    var analyze = false
    @Flag(help: "Run every shape twice: tokens loaded without, then with ANALYZE.") var bothLoadModes = false
    @Option(help: "herald processes in one consumer group (CPU is summed).") var instances = 1
    @Option(name: .customLong("herald-env"), help: ArgumentHelp("Extra environment for herald (repeatable).", valueName: "KEY=VALUE"))
    var heraldEnv: [String] = []
    @Option(help: "Path of herald (default: next to herald-bench).") var herald: String?
    @Option(help: "Path of mock-apns (default: next to herald-bench).") var mockAPNS: String?
    @Option(help: "Path of mock-fcm (default: next to herald-bench).") var mockFCM: String?
    @Option(
        help: """
            Share (0 to 1) of the devices that are Android devices, registered under the app's ID as their package; \
            events then carry an fcm part, and herald sends those through a mock-fcm. 0: APNs only.
            """
    )
    var androidShare = 0.0
    @Option(
        help: """
            Share (0 to 1) of the devices that are browser subscriptions, made on a mock-webpush with two origins and registered \
            under the app's ID; events then carry a webpush part. --android-share + --browser-share is at most 1. 0: no browsers.
            """
    )
    var browserShare = 0.0
    @Option(name: .customLong("mock-webpush"), help: "Path of mock-webpush (default: next to herald-bench).") var mockWebPush: String?
    @Flag(
        help: """
            Let mock-webpush decrypt each message and verify its VAPID signature, as in the tests; off by \
            default here: on this machine the mock's cryptography would take the cores Herald runs on.
            """
    )
    var mockWebPushCryptography = false
    @Option(help: "SVG plot path (default .local/bench/pipeline-<shape>.svg; with several runs, -<shape> goes before .svg).")
    var plot: String?
    @Option(
        help:
            "Produce at this many notifications/s (an open load, for latency below saturation), after the broker alone at the same rate; 0: as fast as possible."
    )
    var rate = 0
    @Option(help: "Seed of the workload (users' device counts, tokens, mixed events).") var seed: UInt64 = 1
    @Option(help: "Apps (bundle IDs) the events take turns addressing, so a poll batch holds several (1 to 100).") var apps = 1
    @Flag(
        help: """
            After each burst, an open load at 20 % and at 50 % of the burst's throughput, for \
            --open-load-seconds each, with the broker alone at the same rate: latency as users feel it.
            """
    )
    var openLoad = false
    @Option(help: "Seconds of each open-load run (the first 5 s are warm-up and not reported).") var openLoadSeconds = 30
    @Option(
        help: """
            The campaign shape: after the burst, the shape's notifications again as a campaign on push.requests.bulk, \
            while this many urgent alerts a second go to push.requests (10 s on the idle Herald first); 0: off.
            """
    )
    var campaignUrgentRate = 0

    func validate() throws {
        guard shape == "all" || PipelineShape(rawValue: shape) != nil else { throw ValidationError("--shape must be single, fanout, mixed or all") }
        guard notifications > 0, instances > 0, partitions > 0 else { throw ValidationError("--notifications, --instances and --partitions must be positive") }
        guard heraldEnv.allSatisfy({ $0.contains("=") }) else { throw ValidationError("--herald-env expects KEY=VALUE") }
        guard (1...100).contains(apps) else { throw ValidationError("--apps must be 1 to 100") }
        guard (0...1).contains(androidShare) else { throw ValidationError("--android-share must be 0 to 1") }
        guard (0...1).contains(browserShare), androidShare + browserShare <= 1 + 1e-9 else {
            throw ValidationError("--browser-share must be 0 to 1, and --android-share + --browser-share at most 1")
        }
        guard apps == 1 || campaignUrgentRate == 0 else { throw ValidationError("--apps and --campaign-urgent-rate do not combine") }
    }

    func run() async throws {
        let services = try BenchServices()
        var logger = Logger(label: "herald-bench")
        logger.logLevel = .error
        let count = full ? 1_000_000 : notifications
        let shapes = PipelineShape(rawValue: shape).map { [$0] } ?? PipelineShape.allCases
        _ = try ChildProcess.runToCompletion(
            herald ?? Workspace.siblingExecutable("herald"),
            arguments: ["migrate"],
            environment: ["HERALD_POSTGRES_URL": services.postgresURL, "HERALD_LOG_LEVEL": "warning"]
        )
        print(
            "pipeline benchmark: \(count) notifications per shape, \(partitions) partitions, \(apps) app(s), \(instances) herald instance(s), Android share \(androidShare), browser share \(browserShare), herald-env [\(heraldEnv.joined(separator: " "))]"
        )
        let brokerRate = try await KafkaLoad.brokerAlone(services: services, records: count, partitions: partitions, logger: logger)
        print("broker alone: \(count) records of ~90 B produced and read back at \(fixed(brokerRate)) records/s")
        if rate > 0 {
            try await printBrokerAlone(at: rate, seconds: max(1, count / rate), services: services, logger: logger)
        }
        for shape in shapes {
            for analyze in bothLoadModes ? [false, true] : [analyze] {
                let suffix = bothLoadModes ? (analyze ? "-analyze" : "-no-analyze") : ""
                var plotPath = ".local/bench/pipeline-\(shape)\(suffix).svg"
                if let plot {
                    plotPath = shapes.count == 1 && !bothLoadModes ? plot : plot.replacingOccurrences(of: ".svg", with: "") + "-\(shape)\(suffix).svg"
                }
                let burst: Double = try await runShape(
                    shape, analyze: analyze, count: count, rate: rate, services: services, brokerRate: brokerRate, plotPath: plotPath, logger: logger)
                if campaignUrgentRate > 0 {
                    print("\n== campaign: the same \(count) notifications on push.requests.bulk, \(campaignUrgentRate) urgent alerts/s on push.requests")
                    let campaign = try await runShape(
                        shape, analyze: analyze, count: count, rate: 0, services: services, brokerRate: brokerRate,
                        plotPath: plotPath.replacingOccurrences(of: ".svg", with: "-campaign.svg"), urgentRate: campaignUrgentRate, logger: logger)
                    print("campaign throughput: \(fixed(campaign)) notifications/s, \(fixed(100 * campaign / burst)) % of the burst's \(fixed(burst))/s")
                }
                guard openLoad else { continue }
                for share in [0.2, 0.5] {
                    let openRate = Int(burst * share)
                    print("\n== open load: \(openRate) notifications/s (\(Int(share * 100)) % of the burst's \(fixed(burst)))/s) for \(openLoadSeconds) s")
                    try await printBrokerAlone(at: openRate, seconds: openLoadSeconds, services: services, logger: logger)
                    _ = try await runShape(
                        shape, analyze: analyze, count: openRate * openLoadSeconds, rate: openRate, services: services, brokerRate: brokerRate,
                        plotPath: plotPath.replacingOccurrences(of: ".svg", with: "-rate\(openRate).svg"), logger: logger)
                }
            }
        }
    }

    /// The broker alone at `perSecond` records/s for `seconds`, with the clients Herald's run
    /// uses: produce -> read and produce -> acknowledged latency after the warm-up.
    private func printBrokerAlone(at perSecond: Int, seconds: Int, services: BenchServices, logger: Logger) async throws {
        let broker = try await KafkaLoad.brokerAloneAtRate(
            services: services, perSecond: perSecond, seconds: seconds, partitions: partitions, logger: logger)
        print("broker alone at \(perSecond) records/s, same clients, after 5 s: produce -> read \(broker.read)")
        print("  produce -> acknowledged \(broker.acknowledged) (Herald's result publish waits for this too)")
    }

    /// One shape: load, start mock and Herald, measure, stop, sender baseline, report and check;
    /// returns the throughput (notifications/s). `rate` 0 produces as fast as possible.
    private func runShape(
        _ shape: PipelineShape,
        analyze: Bool,
        count: Int,
        rate: Int,
        services: BenchServices,
        brokerRate: Double,
        plotPath: String,
        urgentRate: Int = 0,
        logger: Logger
    ) async throws -> Double {
        let tag = "hb\(UUID().uuidString.prefix(8).lowercased())"
        var drawn = Workload(
            shape: shape, notifications: count, seed: seed, tag: tag, apps: apps, androidShare: androidShare, browserShare: browserShare)
        let topics = ["requests", "tokens", "results", "unregistered", "dlq", "channels", "channel-results", "requests.bulk"].map {
            "\(tag).push.\($0)"
        }
        try services.createTopics(topics, partitions: partitions)
        let workspace = try Workspace()
        // The browsers' push service first: the workload's browser tokens are its subscriptions.
        let browsers = try await startBrowserMock(for: &drawn, workspace: workspace, logger: logger)
        var webPushSummary: String?
        defer { if webPushSummary == nil { _ = browsers?.mock.stop() } }
        let workload = drawn
        let urgent =
            urgentRate > 0 ? UrgentLoad(perSecond: urgentRate, topic: topics[0], bundleID: workload.bundleID, users: min(1_000, workload.userCount)) : nil
        let setUp = ShapeSetUp(shape: shape, tag: tag, topics: topics, workspace: workspace, workload: workload, urgent: urgent)
        try await loadTokens(of: setUp, analyze: analyze, browsers: browsers, services: services, logger: logger)

        let mock = try await MockAPNSProcess.start(
            executable: mockAPNS ?? Workspace.siblingExecutable("mock-apns"),
            workspace: workspace,
            maxConcurrentStreams: 1_000
        )
        var mockSummary: String?
        defer { if mockSummary == nil { _ = mock.stop() } }
        let fcmMock =
            androidShare > 0 ? try await MockFCMProcess.start(executable: mockFCM ?? Workspace.siblingExecutable("mock-fcm"), workspace: workspace) : nil
        var fcmSummary: String?
        defer { if fcmSummary == nil { _ = fcmMock?.stop() } }
        let environment = heraldEnvironment(
            for: setUp, services: services, mock: mock, fcmMock: fcmMock, browserEnvironment: browsers?.environment ?? [:])
        let settings = try await heraldSettings(from: environment)
        let mockPIDs = (
            apns: mock.process.processIdentifier, fcm: fcmMock?.process.processIdentifier, webPush: browsers?.mock.process.processIdentifier
        )
        let measured = try await runHeralds(setUp, environment: environment, rate: rate, mockPIDs: mockPIDs, services: services, logger: logger)
        let sender = try await HeraldSenderClient.alone(
            mock: mock, count: workload.tokens.count, connections: settings.connections, concurrency: settings.pipeline.maxConcurrentSends,
            logger: logger)
        let summary = mock.stop()
        mockSummary = summary
        fcmSummary = fcmMock?.stop()
        webPushSummary = browsers?.mock.stop()
        services.deleteTopics(topics)  // only now: no child process runs (see ProcStats.pids)

        return try reportShape(
            setUp, measured: measured, sender: sender, settings: settings, mockSummaries: (summary, fcmSummary, webPushSummary),
            brokerRate: brokerRate, plotPath: plotPath)
    }
}

extension PipelineBenchmark {
    /// With browsers in the workload: starts mock-webpush with two origins, makes one
    /// subscription per browser token (split between the origins, bound to a new VAPID key whose
    /// PEM it writes to the workspace), makes them the workload's browser tokens, and returns the
    /// mock, herald's HERALD_WEBPUSH_* environment and the seconds the subscriptions took; nil
    /// without browsers.
    func startBrowserMock(
        for workload: inout Workload,
        workspace: Workspace,
        logger: Logger
    ) async throws -> BrowserMock? {
        guard browserShare > 0 else { return nil }
        let mock = try await MockWebPushProcess.start(
            executable: mockWebPush ?? Workspace.siblingExecutable("mock-webpush"), workspace: workspace, origins: 2,
            extraArguments: mockWebPushCryptography ? [] : ["--no-cryptography"])
        do {
            let key = P256.Signing.PrivateKey()
            let keyPath = workspace.path("vapid.pem")
            try key.pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)
            let started = ContinuousClock.now
            let subscriptions = try await MockWebPushSubscriber.subscribe(
                count: workload.webPushTokenCount,
                origins: mock.origins,
                // VAPIDSigner spells the public key as browsers take it (base64url of the point).
                applicationServerKey: VAPIDSigner(key: key, subject: "mailto:bench@example.com").publicKeyText,
                caPath: mock.caPath,
                logger: logger
            )
            workload.assignSubscriptions(subscriptions)
            let seconds = (ContinuousClock.now - started).inSeconds
            let environment = [
                "HERALD_WEBPUSH_VAPID_KEY_PATH": keyPath, "HERALD_WEBPUSH_SUBJECT": "mailto:bench@example.com",
                "HERALD_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1", "HERALD_WEBPUSH_CA_PATH": mock.caPath,
            ]
            return (mock, environment, seconds)
        } catch {
            _ = mock.stop()
            throw error
        }
    }
}
