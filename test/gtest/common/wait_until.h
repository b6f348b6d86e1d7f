/*
 * Progress until a condition holds, or a deadline passes.
 */
#ifndef RC_TM_TEST_COMMON_WAIT_UNTIL_H_
#define RC_TM_TEST_COMMON_WAIT_UNTIL_H_

#include <chrono>
#include <functional>

/* Calls progress() until pred() holds (true) or seconds pass (false) */
inline bool wait_until(const std::function<bool()> &pred,
                       const std::function<void()> &progress, double seconds)
{
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration<double>(seconds);
    while (!pred()) {
        if (std::chrono::steady_clock::now() > deadline) {
            return false;
        }
        progress();
    }
    return true;
}

#endif
