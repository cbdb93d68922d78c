import KafkaMessages
import APNSCore
import APNSHTTP2
import ArgumentParser
import Foundation
import HeraldService
import KafkaTransport
import Logging
import PushPipeline

/// The figures of one shape: the printed report, the plot and the mock's counters checked.
extension PipelineBenchmark {
    /// Prints one shape's figures, writes its plot; returns what failed.
    func report(
        _ run: PipelineRun,
        shape: PipelineShape,
        workload: Workload,
        sender: ClientRun,
        senderLine: String,
        brokerRate: Double,
        plotPath: String
    ) -> [String] {
        let total = Double(workload.tokens.count)
        let latencies = run.resultTimes.indices.map { run.resultTimes[$0] - run.produceTimes[Int(run.resultEvents[$0])] }.sorted()
        // Events produced in the first 5 s meet the start-up (first fetches, connections, plans).
        let warm = run.resultTimes.indices.compactMap { index -> Int64? in
            let produced = run.produceTimes[Int(run.resultEvents[index])]
            return produced - run.firstProduceMilliseconds >= 5_000 ? run.resultTimes[index] - produced : nil
        }.sorted()
        let inHerald = run.heraldLatencies.sorted()
        /// CPU seconds of a process group over the window.
        func cpu(_ name: String) -> Double { Double((run.end.ticks[name] ?? 0) - (run.start.ticks[name] ?? 0)) / ProcStats.ticksPerSecond }
        func line(_ name: String, _ seconds: Double) -> String {
            "  \(name.padding(toLength: 14, withPad: " ", startingAt: 0))\(column(seconds * 1e6 / total, width: 8)) µs/notification \(column(100 * seconds / run.seconds, decimals: 0, width: 5)) % of a core"
        }
        let benchSeconds = Double(run.end.benchMicroseconds - run.start.benchMicroseconds) / 1e6
        let busy = 100 * Double(run.end.machine.busy - run.start.machine.busy) / Double(max(1, run.end.machine.total - run.start.machine.total))
        let tenth = max(1, run.rssKilobytes.count / 10)
        let firstRSS = run.rssKilobytes.prefix(tenth).reduce(0, +) / Int64(max(1, min(tenth, run.rssKilobytes.count)))
        let lastRSS = run.rssKilobytes.suffix(tenth).reduce(0, +) / Int64(max(1, min(tenth, run.rssKilobytes.count)))
        let clock = run.withoutTimestamp == 0 ? "result's Kafka timestamp" : "read time (\(run.withoutTimestamp) results had no Kafka timestamp)"
        print(
            """
            throughput: \(fixed(run.throughput)) notifications/s (\(fixed(run.heraldSeconds, 2)) s from the first produce to the last result's timestamp, read \(fixed(run.seconds, 2)) s after the first produce; all events produced in \(fixed(run.produceSeconds, 2)) s)
            latency produce -> result (\(clock) - event's produce time): p50 \(percentile(latencies, 0.5)) ms, p99 \(percentile(latencies, 0.99)) ms, max \(latencies.last ?? 0) ms; first result \(fixed(Double((run.resultTimes.min() ?? 0) - run.firstProduceMilliseconds) / 1000, 2)) s after the first produce
              after the first 5 s (\(warm.count) results): p50 \(percentile(warm, 0.5)) ms, p99 \(percentile(warm, 0.99)) ms, max \(warm.last ?? 0) ms
              inside herald, poll to APNs outcome (the results' latency_ms): p50 \(percentile(inHerald, 0.5)) ms, p99 \(percentile(inHerald, 0.99)) ms, max \(inHerald.last ?? 0) ms
            CPU over the window:
            \(line("herald", cpu("herald")))\(instances > 1 ? " (\(instances) instances)" : "")
            \(line("postgres", cpu("postgres")))
            \(line("broker: tansu", cpu("tansu")))
            \(line("broker: proxy", cpu("proxy")))
            \(line("mock-apns", cpu("mock-apns")))\(androidShare > 0 ? "\n" + line("mock-fcm", cpu("mock-fcm")) : "")\(browserShare > 0 ? "\n" + line("mock-webpush", cpu("mock-webpush")) : "")
            \(line("herald-bench", benchSeconds)) (producer and result reader)
              machine busy \(fixed(busy)) % of \(ProcessInfo.processInfo.activeProcessorCount) cores
            herald memory: peak RSS (VmHWM\(instances > 1 ? ", largest instance" : "")) \(fixed(Double(run.peakKilobytes) / 1024, 1)) MB; RSS\(instances > 1 ? " (all instances)" : "") first tenth \(fixed(Double(firstRSS) / 1024, 1)) MB -> last tenth \(fixed(Double(lastRSS) / 1024, 1)) MB (\(fixed(Double(lastRSS - firstRSS) / 1024, 1)) MB), 2 s after the last result \(fixed(Double(run.rssAfterKilobytes) / 1024, 1)) MB
            results: \(latencies.count) of \(workload.tokens.count), \(run.duplicates) duplicates, \(run.unexpected) unexpected, not delivered: \(run.notDelivered.isEmpty ? "none" : "\(run.notDelivered)")
            \(senderLine)
            broker alone: \(fixed(brokerRate)) records/s
            headline: pipeline/sender-alone throughput \(fixed(run.throughput / sender.requestsPerSecond, 3)); herald CPU per notification / sender CPU per request \(fixed(cpu("herald") * 1e6 / total / sender.cpuMicrosecondsPerRequest, 2)) (herald \(fixed(cpu("herald") * 1e6 / total, 1)) µs, postgres \(fixed(cpu("postgres") * 1e6 / total, 1)) µs per notification)
            """
        )
        let histograms = HeraldHistograms(run.heraldMetrics)
        print(histograms.summary(title: "herald's histograms over the whole run (/metrics)"))
        print(perBatchLine(run, histograms: histograms, notifications: total, heraldCPU: cpu("herald")))
        if let warm = run.warm {
            let window = Double(run.resultTimes.count - warm.results)
            let heraldCPU = Double((run.end.ticks["herald"] ?? 0) - (warm.cpu.ticks["herald"] ?? 0)) / ProcStats.ticksPerSecond
            print(
                "after the first \(PipelineRun.warmUp) (\(fixed(window)) results): herald CPU \(fixed(heraldCPU * 1e6 / max(1, window), 1)) µs/notification"
            )
            print(histograms.since(HeraldHistograms(warm.metrics)).summary(title: "herald's histograms after the first \(PipelineRun.warmUp)"))
        }
        writePlot(run, title: "herald pipeline, shape \(shape), \(workload.eventCount) events, \(workload.tokens.count) notifications", path: plotPath)
        var failures: [String] = []
        if latencies.count != workload.tokens.count { failures.append("\(workload.tokens.count - latencies.count) notifications without a result") }
        if run.duplicates > 0 { failures.append("\(run.duplicates) duplicate results") }
        if run.unexpected > 0 { failures.append("\(run.unexpected) results of no expected (event, device)") }
        if !run.notDelivered.isEmpty { failures.append("not delivered: \(run.notDelivered)") }
        return failures
    }

    /// Herald's fixed cost per poll batch with events (one token lookup each, one app here) and
    /// per notification: CPU, jobs of the pipeline's tasks (`herald_pipeline_jobs_total`: one per
    /// resumption), context switches, read/write system calls, PostgreSQL round trips.
    func perBatchLine(_ run: PipelineRun, histograms: HeraldHistograms, notifications: Double, heraldCPU: Double) -> String {
        let batches = max(1, histograms.histograms["token_lookup"]?.count ?? 0)
        let switches = Double(run.end.heraldContextSwitches - run.start.heraldContextSwitches)
        let syscalls = Double(run.end.heraldReadWriteSyscalls - run.start.heraldReadWriteSyscalls)
        let roundTrips = Double(run.postgresTransactions)
        let jobs = run.heraldMetrics.reduce(0.0) { total, text in
            let line = text.split(separator: "\n").first { $0.hasPrefix("herald_pipeline_jobs_total ") }
            return total + (line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0)
        }
        return "per poll batch with events (\(fixed(batches)) batches, \(fixed(notifications / batches, 1)) notifications each): "
            + "herald CPU \(fixed(heraldCPU * 1e6 / batches, 0)) µs, \(fixed(jobs / batches, 1)) pipeline jobs, \(fixed(switches / batches, 1)) context switches, "
            + "\(fixed(syscalls / batches, 1)) read/write system calls, \(fixed(roundTrips / batches, 2)) PostgreSQL round trips; "
            + "per notification \(fixed(switches / notifications, 2)), \(fixed(syscalls / notifications, 2)) and \(fixed(roundTrips / notifications, 3))"
    }

    /// Throughput and p50/p99 latency per second of the run (by the result's timestamp) as SVG.
    func writePlot(_ run: PipelineRun, title: String, path: String) {
        var perSecond: [[Int64]] = []
        for (index, time) in run.resultTimes.enumerated() {
            let second = max(0, Int((time - run.firstProduceMilliseconds) / 1000))
            while perSecond.count <= second { perSecond.append([]) }
            perSecond[second].append(time - run.produceTimes[Int(run.resultEvents[index])])
        }
        let sorted = perSecond.map { $0.sorted() }
        let svg = PipelinePlot.svg(
            title: title,
            throughput: sorted.map { Double($0.count) },
            p50: sorted.map { $0.isEmpty ? nil : Double(percentile($0, 0.5)) },
            p99: sorted.map { $0.isEmpty ? nil : Double(percentile($0, 0.99)) }
        )
        do {
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try svg.write(toFile: path, atomically: true, encoding: .utf8)
            print("plot: \(path)")
        } catch {
            print("plot: cannot write \(path): \(error)")
        }
    }

    /// Checks the mock's counters (printed as it stops) against what was sent.
    func mockFailures(_ summary: String, expected: Int) -> [String] {
        print("\(summary) (expected accepted=\(expected): pipeline + sender baseline with warm-up)")
        func counter(_ name: String) -> Int? {
            summary.split(separator: " ").first { $0.hasPrefix("\(name)=") }.flatMap { Int($0.dropFirst(name.count + 1)) }
        }
        guard let accepted = counter("accepted"), let repeated = counter("repeated_apns_id") else {
            return ["cannot read mock-apns counters from '\(summary)'"]
        }
        var failures: [String] = []
        if accepted != expected { failures.append("mock-apns accepted \(accepted) pushes, expected \(expected)") }
        if repeated > 0 { failures.append("mock-apns saw \(repeated) repeated apns-ids (pushed twice)") }
        return failures
    }

    /// A child mock's summary (`mock-fcm`'s or `mock-webpush`'s, printed as it stops) against the
    /// notifications it should have delivered (nothing to check without that mock).
    func deliveredFailures(of mock: String, summary: String?, expected: Int) -> [String] {
        guard let summary else { return [] }
        print("\(summary) (expected delivered=\(expected))")
        let delivered = summary.split(separator: " ").first { $0.hasPrefix("delivered=") }.flatMap { Int($0.dropFirst("delivered=".count)) }
        guard let delivered else { return ["cannot read \(mock) counters from '\(summary)'"] }
        return delivered == expected ? [] : ["\(mock) delivered \(delivered) messages, expected \(expected)"]
    }
}

/// What one shape's measurement window saw.
struct PipelineRun {
    var start: CPUSample
    var end: CPUSample
    /// First produce to the last result read (the measurement window).
    var seconds = 0.0
    var produceSeconds = 0.0
    var firstProduceMilliseconds: Int64 = 0
    /// Produce time of each event, ms since 1970.
    var produceTimes: [Int64] = []
    /// Per unique result: its event, and its Kafka timestamp (read time if it had none).
    var resultEvents: [Int32] = []
    var resultTimes: [Int64] = []
    /// Each result's `latency_ms`: from Herald's poll to the outcome (before ledger and publish).
    var heraldLatencies: [Int64] = []
    /// Each herald's /metrics at the end of the run.
    var heraldMetrics: [String] = []
    var withoutTimestamp = 0
    var duplicates = 0
    var unexpected = 0
    var notDelivered: [String: Int] = [:]
    /// PostgreSQL transactions of the benchmark's database over the window (its round trips).
    var postgresTransactions: Int64 = 0
    /// Herald's VmRSS (summed over instances) once a second, and the largest VmHWM.
    var rssKilobytes: [Int64] = []
    var peakKilobytes: Int64 = 0
    /// Herald's VmRSS two seconds after the last result.
    var rssAfterKilobytes: Int64 = 0
    /// CPU, Herald's /metrics and the results read so far once the warm-up was over.
    var warm: (cpu: CPUSample, metrics: [String], results: Int)?
    /// The start of a run not reported in its warm figures (connections, first fetches, plans).
    static let warmUp: Duration = .seconds(5)

    init(start: CPUSample) {
        self.start = start
        self.end = start
    }

    /// First produce to the last result's timestamp: how long Herald took, whether or not the
    /// result reader kept up (on two shared cores it falls behind when the machine is saturated,
    /// and catches up once Herald is done).
    var heraldSeconds: Double {
        guard let last = resultTimes.max() else { return seconds }
        return max(0.001, Double(last - firstProduceMilliseconds) / 1000)
    }

    /// Notifications per second over ``heraldSeconds``.
    var throughput: Double { Double(resultTimes.count) / heraldSeconds }
}

/// `value` with `decimals` digits after the point.
func fixed(_ value: Double, _ decimals: Int = 0) -> String { String(format: "%.\(decimals)f", value) }
