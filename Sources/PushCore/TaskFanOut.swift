/// A batch sent the default way (the platform clients' `sendAll` when they have no batch path of
/// their own): `send(index)` for each index below `count`, each from its own child task, its
/// answer or error handed to `answered`.
package func sendEachInATask<Answer: Sendable>(
    _ count: Int,
    answered: @escaping @Sendable (Int, Result<Answer, any Error>) -> Void,
    send: @escaping @Sendable (Int) async throws -> Answer
) async {
    await withDiscardingTaskGroup { group in
        for index in 0..<count {
            group.addTask {
                do {
                    answered(index, .success(try await send(index)))
                } catch {
                    answered(index, .failure(error))
                }
            }
        }
    }
}
