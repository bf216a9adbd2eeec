#include "quartet/rl/scoring.hpp"

#include <torch/types.h>

#include "quartet/dist/exchange.hpp"
#include "quartet/dist/placement_config.hpp"

namespace quartet {

torch::Tensor cat_actions(const std::vector<torch::Tensor>& parts, int64_t actions) {
  std::vector<torch::Tensor> padded;
  for (const auto& p : parts) padded.push_back(torch::constant_pad_nd(p, {0, actions - p.size(1)}));
  return torch::cat(padded);
}

namespace {

// What the reward model reads of `rollouts`: the rollouts, or the rows RewardInput makes of them.
RolloutBatch reward_rows(const ScoringSetup& setup, const RolloutBatch& rollouts, const RowPrompts& prompts,
                         const std::vector<std::string>* completions = nullptr) {
  if (!setup.reward_input) return rollouts;
  return setup.reward_input(rollouts, completions ? *completions : setup.decode(rollouts), prompts);
}

// Every model on every rank: the whole batch through each in turn.
class ColocatedScoring : public Scoring {
 public:
  ColocatedScoring(const RoleModels& models, ModelParking& parking, ScoringSetup setup)
      : models_(models), parking_(parking), setup_(std::move(setup)) {}

  void hand_off(int, const RolloutBatch&, const RowPrompts&) override {}

  void score(Iteration& it, PhaseClock&) override {
    const ScorePasses& mb = setup_.passes;
    if (RoleModel* reference = models_.get(Role::reference)) {
      parking_.keep_only({Role::reference});
      it.ref_logp = score_logprobs(*reference->model, it.batch, mb, setup_.view);
    }
    it.completions = setup_.decode(it.batch);
    if (RoleModel* reward = models_.get(Role::reward)) {
      parking_.keep_only({Role::reward});
      it.scores = score_sequences(*reward->model, reward_rows(setup_, it.batch, {it.prompts, it.records}, &it.completions), mb);
    }
    if (RoleModel* critic = models_.get(Role::critic)) {
      parking_.keep_only({Role::critic});
      it.values = score_values(*critic->model, it.batch, mb);
      it.critic_batch = it.batch;
      it.critic_values = it.values;
    }
  }

  void send_returns(Iteration&) override {}  // the critic is on the actor's ranks

  torch::Tensor reward_scores(const RolloutBatch& rollouts, const std::vector<std::string>& completions,
                              const RowPrompts& prompts) override {
    RoleModel* reward = models_.get(Role::reward);
    if (!reward) return {};
    parking_.keep_only({Role::reward});
    torch::Tensor scores = score_sequences(*reward->model, reward_rows(setup_, rollouts, prompts, &completions),
                                           setup_.passes);
    return scores.defined() ? scores : torch::zeros({0}, torch::kFloat32);
  }

 private:
  const RoleModels& models_;
  ModelParking& parking_;
  ScoringSetup setup_;
};

// Each role on its own ranks: the chunks travel to the scoring groups and back over MPI.
class DisjointScoring : public Scoring {
 public:
  DisjointScoring(Runtime& rt, const RoleModels& models, ScoringSetup setup)
      : models_(models), setup_(std::move(setup)) {
    const auto& actors = rt.placement.ranks_of(Role::actor);
    // One exchange per scoring group and chunk, so that chunk c can be in flight while c - 1
    // is scored (an exchange holds one outstanding batch).
    auto make = [&](Role r, const std::string& name, int kind, Exchanges* out) {
      if (!rt.placement.has(r) || !has_model(rt.config, r)) return;
      for (int c = 0; c < setup_.chunks; ++c)
        out->push_back(std::make_unique<GroupExchange>(rt.world, name + " (chunk " + std::to_string(c) + ")", actors,
                                                       rt.placement.ranks_of(r), 16 + 4 * c + kind, rt.device,
                                                       rt.watchdog.get()));
    };
    make(Role::reference, "rollouts to reference", 0, &reference_);
    make(Role::reward, "rollouts to reward", 1, &reward_);
    make(Role::critic, "rollouts to critic", 2, &critic_);
    make(Role::critic, "returns to critic", 3, &returns_);
    // Evaluation's rollouts to the reward model: a tag below the chunks' (16 + 4c + kind).
    if (rt.placement.has(Role::reward) && has_model(rt.config, Role::reward))
      eval_ = std::make_unique<GroupExchange>(rt.world, "evaluation rollouts to reward", actors,
                                              rt.placement.ranks_of(Role::reward), 15, rt.device, rt.watchdog.get());
  }

  void hand_off(int chunk, const RolloutBatch& b, const RowPrompts& prompts) override {
    if (reference_.empty() && reward_.empty() && critic_.empty()) return;
    // One copy to the host serves all three sends.
    const Batch host{b.sequences.cpu(), b.attention_mask.cpu(), b.action_mask.cpu()};
    for (auto* group : {&reference_, &critic_})
      if (!group->empty()) (*group)[static_cast<size_t>(chunk)]->forward(host);
    if (reward_.empty()) return;
    if (!setup_.reward_input) {
      reward_[static_cast<size_t>(chunk)]->forward(host);
      return;
    }
    // The chunk's completions are decoded for the reward model's rows and kept: score() hands
    // them on instead of decoding the batch again.
    const std::vector<std::string> completions = setup_.decode(b);
    decoded_.insert(decoded_.end(), completions.begin(), completions.end());
    const RolloutBatch r = reward_rows(setup_, b, prompts, &completions);
    reward_[static_cast<size_t>(chunk)]->forward({r.sequences.cpu(), r.attention_mask.cpu(), r.action_mask.cpu()});
  }

  void score(Iteration& it, PhaseClock& clock) override {
    RoleModel* actor = models_.get(Role::actor);
    waited_ = actor != nullptr;  // an actor rank's waiting was its own generation
    if (RoleModel* m = models_.get(Role::reference); m && !reference_.empty())
      serve(reference_, clock, [&](const RolloutBatch& b) { return score_logprobs(*m->model, b, setup_.passes, setup_.view); },
            setup_.pad_id);
    if (RoleModel* m = models_.get(Role::reward); m && !reward_.empty())
      serve(reward_, clock, [&](const RolloutBatch& b) { return score_sequences(*m->model, b, setup_.passes); },
            setup_.reward_pad_id);
    if (RoleModel* m = models_.get(Role::critic); m && !critic_.empty())
      serve_critic(it, clock, *m);
    if (!actor) return;
    // While the scoring groups work (hand_off decoded them already where the reward model reads text).
    it.completions = decoded_.empty() ? setup_.decode(it.batch) : std::move(decoded_);
    decoded_.clear();
    if (!reference_.empty()) it.ref_logp = collect(reference_, it.batch.actions());
    if (!reward_.empty()) it.scores = collect(reward_, -1);
    if (!critic_.empty()) it.values = collect(critic_, it.batch.actions());
  }

  torch::Tensor reward_scores(const RolloutBatch& rollouts, const std::vector<std::string>& completions,
                              const RowPrompts& prompts) override {
    if (!eval_) return {};
    if (models_.get(Role::actor)) {
      const RolloutBatch r = rollouts.rows() > 0 ? reward_rows(setup_, rollouts, prompts, &completions) : rollouts;
      eval_->forward({r.sequences.cpu(), r.attention_mask.cpu(), r.action_mask.cpu()});
      return eval_->backward({})[0];
    }
    RoleModel* reward = models_.get(Role::reward);
    if (!reward) return {};
    const std::vector<RolloutBatch> pieces = as_rollouts(eval_->forward({}));
    torch::Tensor scores = score_sequences(*reward->model, concat_rollouts(pieces, setup_.reward_pad_id, setup_.max_width),
                                           setup_.passes);
    if (!scores.defined()) scores = torch::zeros({0}, torch::kFloat32);
    std::vector<Batch> results;
    for (auto& part : split_by_pieces(scores, pieces)) results.push_back({part});
    eval_->backward(results);
    return {};
  }

  void send_returns(Iteration& it) override {
    if (returns_.empty()) return;
    if (models_.get(Role::actor)) {
      // Chunk by chunk, so that the critic's rows line up with the rollouts it holds.
      int64_t row = 0;
      for (size_t c = 0; c < it.chunks.size(); ++c) {
        const RolloutBatch& cb = it.chunks[c];
        returns_[c]->forward({it.returns.narrow(0, row, cb.rows()).narrow(1, 0, cb.actions()).contiguous()});
        row += cb.rows();
      }
    }
    if (models_.get(Role::critic)) {
      std::vector<torch::Tensor> parts;
      for (auto& e : returns_)
        for (auto& p : e->forward({})) parts.push_back(p[0]);
      it.returns = cat_actions(parts, concat_actions(critic_pieces_, setup_.max_width));
    }
  }

 private:
  using Exchanges = std::vector<std::unique_ptr<GroupExchange>>;

  static std::vector<RolloutBatch> as_rollouts(const std::vector<Batch>& pieces) {
    std::vector<RolloutBatch> out;
    for (const auto& p : pieces) out.push_back({p[0], p[1], p[2]});
    return out;
  }

  // The scoring rank's side: each chunk as it comes, answered without waiting for the actor to
  // take the answer. Returns the pieces and their results, in order.
  std::pair<std::vector<RolloutBatch>, std::vector<torch::Tensor>> serve(
      Exchanges& exs, PhaseClock& clock, const std::function<torch::Tensor(const RolloutBatch&)>& score_of,
      int64_t pad_id) {
    std::vector<RolloutBatch> all_pieces;
    std::vector<torch::Tensor> all_parts;
    for (auto& e : exs) {
      auto pieces = as_rollouts(e->forward({}));
      if (!waited_) {
        clock.charge_wait(kGenerate);
        waited_ = true;
      }
      torch::Tensor out = score_of(concat_rollouts(pieces, pad_id, setup_.max_width));
      std::vector<Batch> results;
      for (auto& part : split_by_pieces(out, pieces)) {
        results.push_back({part});
        all_parts.push_back(part);
      }
      e->backward_posted(results);
      all_pieces.insert(all_pieces.end(), pieces.begin(), pieces.end());
    }
    for (auto& e : exs) e->finish_sends();
    return {all_pieces, all_parts};
  }

  // The critic keeps what it valued: its update trains on these rows.
  void serve_critic(Iteration& it, PhaseClock& clock, RoleModel& critic) {
    auto [pieces, parts] = serve(
        critic_, clock, [&](const RolloutBatch& b) { return score_values(*critic.model, b, setup_.passes); },
        setup_.pad_id);
    critic_pieces_ = pieces;
    const int64_t actions = concat_actions(pieces, setup_.max_width);
    it.critic_values = cat_actions(parts, actions);
    it.critic_batch = concat_rollouts(pieces, setup_.pad_id, setup_.max_width);
  }

  // The actor rank's side: its rows' results from every chunk's exchange.
  static torch::Tensor collect(Exchanges& exs, int64_t per_token_actions) {
    std::vector<torch::Tensor> parts;
    for (auto& e : exs) parts.push_back(e->backward({})[0]);
    return per_token_actions >= 0 ? cat_actions(parts, per_token_actions) : torch::cat(parts);
  }

  const RoleModels& models_;
  ScoringSetup setup_;
  Exchanges reference_, reward_, critic_, returns_;
  std::unique_ptr<GroupExchange> eval_;  // evaluation's rollouts to the reward group
  std::vector<RolloutBatch> critic_pieces_;  // this iteration's, on critic ranks
  std::vector<std::string> decoded_;         // actor ranks: this round's completions, as hand_off decoded them
  bool waited_ = false;
};

}  // namespace

std::unique_ptr<Scoring> make_scoring(Runtime& rt, const RoleModels& models, ModelParking& parking,
                                      ScoringSetup setup) {
  if (rt.placement.mode == PlacementMode::colocated) return std::make_unique<ColocatedScoring>(models, parking, std::move(setup));
  return std::make_unique<DisjointScoring>(rt, models, std::move(setup));
}

}  // namespace quartet
