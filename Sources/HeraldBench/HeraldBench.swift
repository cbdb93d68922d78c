import ArgumentParser

/// `herald-bench`: Herald's benchmarks. Every figure is printed next to a baseline measured in
/// the same run, because absolute numbers on a shared machine say little (see BENCHMARKS.md).
@main
struct HeraldBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald-bench",
        abstract:
            "Benchmarks Herald's APNs, FCM and Web Push senders against h2load, its token lookups against PostgreSQL, Web Push encryption and the whole pipeline.",
        subcommands: [
            SenderBenchmark.self, FCMSenderBenchmark.self, WebPushSenderBenchmark.self, LookupBenchmark.self, PipelineBenchmark.self,
            WebPushEncryptionBenchmark.self,
        ]
    )
}
