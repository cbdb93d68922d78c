import KafkaMessages
import APNSCore
import APNSHTTP2
import ArgumentParser
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PushPipeline

extension PipelineBenchmark {
    /// Produces the events and reads the results while sampling Herald and its neighbours.
    func measure(
        _ workload: Workload,
        rate: Int,
        topics: [String],
        urgent: UrgentLoad?,
        heralds: [HeraldChild],
        mockPID: Int32,
        fcmMockPID: Int32?,
        webPushMockPID: Int32?,
        services: BenchServices,
        logger: Logger
    ) async throws -> PipelineRun {
        let producer = try KafkaProducer(configuration: services.kafka, logger: logger)
        let reader = try KafkaConsumer(configuration: services.kafka, groupID: "\(topics[2]).reader", topics: [topics[2]], logger: logger)
        // A campaign goes to the bulk topic, with the urgent alerts on push.requests.
        let messages = (0..<workload.eventCount).map {
            KafkaOutgoingMessage(topic: urgent == nil ? topics[0] : topics[7], key: Array(workload.eventID($0).utf8), value: workload.eventJSON($0))
        }
        let probes = RunProbes(
            broker: services.brokerPIDs(), heralds: heralds, heraldPIDs: heralds.map(\.pid), mockPID: mockPID, fcmMockPID: fcmMockPID,
            webPushMockPID: webPushMockPID)
        return try await KafkaLoad.withClients(producer, reader) {
            try await KafkaLoad.waitUntilJoined(reader)
            let firstCampaignAlert = try await measureIdleAlerts(urgent, producer: producer, reader: reader)
            return try await measureRun(
                messages, of: workload, rate: rate, urgent: urgent, firstCampaignAlert: firstCampaignAlert, producer: producer, reader: reader,
                probes: probes, services: services, logger: logger)
        }
    }

    /// With urgent alerts, the idle figure first: 10 s of alerts alone on the idle Herald, then
    /// 2 s for the last results; returns the number of the next alert (0 without alerts).
    private func measureIdleAlerts(_ urgent: UrgentLoad?, producer: KafkaProducer, reader: KafkaConsumer) async throws -> Int {
        guard let urgent else { return 0 }
        async let idleProduced = urgent.produce(with: producer, phase: .idle, from: 0, for: .seconds(10))
        let idleEnd = ContinuousClock.now + .seconds(12)
        while ContinuousClock.now < idleEnd {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(100)) {
                _ = ResultTally.urgentResult(message, of: urgent)
            }
        }
        return try await idleProduced
    }

    /// The measured window: produces every event (with the campaign's urgent alerts from
    /// `firstCampaignAlert` beside them) and reads the results until every notification has one,
    /// sampling Herald and its neighbours; then the statistics and the late results.
    private func measureRun(
        _ messages: [KafkaOutgoingMessage],
        of workload: Workload,
        rate: Int,
        urgent: UrgentLoad?,
        firstCampaignAlert: Int,
        producer: KafkaProducer,
        reader: KafkaConsumer,
        probes: RunProbes,
        services: BenchServices,
        logger: Logger
    ) async throws -> PipelineRun {
        var tally = ResultTally(workload: workload, urgent: urgent)
        let transactionsBefore = try await services.transactionCount(logger: logger)
        var run = PipelineRun(start: probes.cpuSample())
        let clock = ContinuousClock()
        let startedAt = clock.now
        run.firstProduceMilliseconds = wallMilliseconds()
        // Events a second for the asked notification rate (events carry different numbers).
        let eventsPerSecond = rate > 0 ? Double(rate) * Double(messages.count) / Double(workload.tokens.count) : nil
        async let produced = KafkaLoad.produceAll(messages, producer: producer, perSecond: eventsPerSecond)
        let urgentDuringCampaign = urgent.map { urgent in
            Task { try await urgent.produce(with: producer, phase: .campaign, from: firstCampaignAlert, for: nil) }
        }
        try await readAllResults(reader, tally: &tally, run: &run, startedAt: startedAt, probes: probes)
        run.seconds = (clock.now - startedAt).inSeconds
        run.end = probes.cpuSample()
        // The statistics lag: read them after a second, outside the CPU window.
        try await Task.sleep(for: .seconds(1))
        run.postgresTransactions = try await services.transactionCount(logger: logger) - transactionsBefore
        run.peakKilobytes = probes.heraldPIDs.map { ProcStats.statusKilobytes($0, "VmHWM") }.max() ?? 0
        (run.produceTimes, _, run.produceSeconds) = try await produced
        urgentDuringCampaign?.cancel()
        _ = try? await urgentDuringCampaign?.value
        try await readLateResults(reader, tally: &tally, run: &run)
        run.rssAfterKilobytes = probes.heraldRSSKilobytes()
        run.heraldMetrics = probes.heraldMetrics()
        return run
    }

    /// Reads push.results until every notification has its result; once a second it records
    /// Herald's RSS and prints the progress, and once past the warm-up it takes the warm sample.
    private func readAllResults(
        _ reader: KafkaConsumer,
        tally: inout ResultTally,
        run: inout PipelineRun,
        startedAt: ContinuousClock.Instant,
        probes: RunProbes
    ) async throws {
        let total = tally.workload.tokens.count
        let clock = ContinuousClock()
        var (lastUnique, lastTick) = (0, startedAt)
        try await KafkaLoad.drain(reader, target: total, done: { tally.unique }, handle: { tally.handle($0, into: &run) }) {
            if run.warm == nil, clock.now - startedAt >= PipelineRun.warmUp {
                run.warm = (probes.cpuSample(), probes.heraldMetrics(), tally.unique)
            }
            run.rssKilobytes.append(probes.heraldRSSKilobytes())
            let unique = tally.unique
            let rate = Double(unique - lastUnique) / (clock.now - lastTick).inSeconds
            print("  \(unique)/\(total) notifications, \(fixed(rate))/s over the last second, \(fixed((clock.now - startedAt).inSeconds, 1)) s")
            (lastUnique, lastTick) = (unique, clock.now)
            fflush(nil)  // show progress at once through a pipe (tee) too
        }
    }

    /// Two more seconds of push.results (outside the window) for late duplicates, longer until
    /// every urgent alert has its results (at most 15 s).
    private func readLateResults(_ reader: KafkaConsumer, tally: inout ResultTally, run: inout PipelineRun) async throws {
        let clock = ContinuousClock()
        let graceEnd = clock.now + .seconds(2)
        let urgentEnd = clock.now + .seconds(15)
        while clock.now < graceEnd || (clock.now < urgentEnd && tally.urgent?.progress.allAnswered == false) {
            for message in try await reader.poll(maxMessages: 10_000, timeout: .milliseconds(200)) { tally.handle(message, into: &run) }
        }
    }
}

/// Herald's instances and their neighbours while a run goes: CPU per group of processes,
/// Herald's memory and /metrics.
private struct RunProbes {
    let broker: (tansu: [Int32], proxy: [Int32])
    let heralds: [HeraldChild]
    let heraldPIDs: [Int32]
    let mockPID: Int32
    let fcmMockPID: Int32?
    let webPushMockPID: Int32?

    /// The CPU of every group now; PostgreSQL's processes are listed anew each time.
    func cpuSample() -> CPUSample {
        let postgres = ProcStats.pids { comm, _ in comm == "postgres" }
        return CPUSample.take([
            "herald": heraldPIDs, "postgres": postgres, "tansu": broker.tansu, "proxy": broker.proxy, "mock-apns": [mockPID],
            "mock-fcm": fcmMockPID.map { [$0] } ?? [], "mock-webpush": webPushMockPID.map { [$0] } ?? [],
        ])
    }

    /// Herald's VmRSS, summed over its instances.
    func heraldRSSKilobytes() -> Int64 {
        heraldPIDs.map { ProcStats.statusKilobytes($0, "VmRSS") }.reduce(0, +)
    }

    /// Each herald's /metrics (of those that answer).
    func heraldMetrics() -> [String] {
        heralds.compactMap { httpGet(port: $0.port, path: "/metrics")?.body }
    }
}

/// The push.results records of a run counted against its workload: each (event, device) once,
/// the urgent alerts' handed to their ``UrgentLoad``.
private struct ResultTally {
    static let eventKey = Array(#""event_id":""#.utf8)
    static let tokenKey = Array(#""token":""#.utf8)
    static let statusKey = Array(#""status":""#.utf8)
    static let latencyKey = Array(#""latency_ms":"#.utf8)

    let workload: Workload
    let urgent: UrgentLoad?
    /// Whether each token has had its result.
    private var seen: [Bool]
    /// Tokens with a result so far.
    private(set) var unique = 0

    init(workload: Workload, urgent: UrgentLoad?) {
        self.workload = workload
        self.urgent = urgent
        seen = [Bool](repeating: false, count: workload.tokens.count)
    }

    /// Takes a push.results record of an urgent alert; false for any other.
    static func urgentResult(_ message: KafkaMessage, of urgent: UrgentLoad?) -> Bool {
        guard let urgent, let value = message.value, let id = jsonString(eventKey, in: value) else { return false }
        return urgent.handle(
            eventID: id,
            resultAt: message.timestampMilliseconds ?? wallMilliseconds(),
            heraldMilliseconds: jsonInteger(latencyKey, in: value)
        )
    }

    /// Counts one push.results record against the workload, into `run`.
    mutating func handle(_ message: KafkaMessage, into run: inout PipelineRun) {
        if Self.urgentResult(message, of: urgent) { return }
        guard let value = message.value, let id = jsonString(Self.eventKey, in: value), let token = jsonString(Self.tokenKey, in: value),
            let event = workload.eventIndex(id), let index = workload.tokenIndex[token].map(Int.init),
            workload.tokenEvents[index] == event
        else {
            run.unexpected += 1
            return
        }
        guard !seen[index] else {
            run.duplicates += 1
            return
        }
        seen[index] = true
        unique += 1
        let status = jsonString(Self.statusKey, in: value) ?? "unreadable"
        if status != "delivered" { run.notDelivered[status, default: 0] += 1 }
        run.resultEvents.append(Int32(event))
        run.heraldLatencies.append(jsonInteger(Self.latencyKey, in: value) ?? -1)
        if let timestamp = message.timestampMilliseconds {
            run.resultTimes.append(timestamp)
        } else {
            run.resultTimes.append(wallMilliseconds())
            run.withoutTimestamp += 1
        }
    }
}
