import APNSCore
import APNSHTTP2
import ArgumentParser
import Crypto
import Foundation

/// A temporary directory for one benchmark run, removed at exit.
final class Workspace {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    /// An executable built next to this one (same `swift build` products directory).
    static func siblingExecutable(_ name: String) -> String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path
    }
}

enum ChildProcess {
    /// Runs `executable` to completion (with exactly `environment`, when given) and returns its
    /// standard output; throws on a non-zero exit.
    static func runToCompletion(_ executable: String, arguments: [String], environment: [String: String]? = nil) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw ValidationError("\(executable) exited with \(process.terminationStatus):\n\(text)")
        }
        return text
    }
}

/// `mock-apns` as a child process with token authentication, its own provider key and CA.
struct MockAPNSProcess {
    let process: Process
    let port: Int
    let caPath: String
    let logPath: String
    let credentials: ProviderTokenCredentials

    static func start(executable: String, workspace: Workspace, maxConcurrentStreams: Int) async throws -> MockAPNSProcess {
        let key = P256.Signing.PrivateKey()
        let credentials = ProviderTokenCredentials(keyID: "BENCHKEY01", teamID: "BENCHTEAM1", privateKey: key)
        try key.pemRepresentation.write(toFile: workspace.path("AuthKey.p8"), atomically: true, encoding: .utf8)
        let portFile = workspace.path("mock.port")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = [
            "--port", "0", "--port-file", portFile, "--ca-out", workspace.path("mock-ca.pem"),
            "--provider-key", "\(credentials.keyID)=\(workspace.path("AuthKey.p8"))", "--team-id", credentials.teamID,
            "--max-concurrent-streams", "\(maxConcurrentStreams)",
        ]
        process.standardOutput = FileHandle.nullDevice
        guard FileManager.default.createFile(atPath: workspace.path("mock.log"), contents: nil) else {
            throw ValidationError("cannot create \(workspace.path("mock.log"))")
        }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: workspace.path("mock.log")))
        try process.run()
        for _ in 0..<200 {
            if let text = try? String(contentsOfFile: portFile, encoding: .utf8),
                let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                return MockAPNSProcess(
                    process: process,
                    port: port,
                    caPath: workspace.path("mock-ca.pem"),
                    logPath: workspace.path("mock.log"),
                    credentials: credentials
                )
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.terminate()
        throw ValidationError("mock-apns (\(executable)) did not start listening")
    }

    /// SIGTERM, then waits; returns the counters the mock prints as it stops.
    func stop() -> String {
        process.terminate()
        process.waitUntilExit()
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").last.map(String.init) ?? ""
    }
}
