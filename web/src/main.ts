// The explainer page: eleven playgrounds about the first layer and the position schemes, then the user's own run or length study.
import "./style.css";
import { alibiPlayground } from "./playgrounds/alibi";
import { firePlayground, t5Playground } from "./playgrounds/biases";
import { firstLayerPlayground } from "./playgrounds/firstLayer";
import { gatesPlayground } from "./playgrounds/gates";
import { kerplePlayground } from "./playgrounds/kerple";
import { oneHotPlayground } from "./playgrounds/onehot";
import { ropePlayground } from "./playgrounds/rope";
import { sinusoidalPlayground } from "./playgrounds/sinusoidal";
import { sumPlayground } from "./playgrounds/sum";
import { xposPlayground } from "./playgrounds/xpos";
import { runSection } from "./run/view";
import { studySection } from "./study/view";
import { el } from "./ui";

function main(): void {
  const app = document.getElementById("app") ?? document.body;
  const run = window.OCTLM_RUN;
  const study = window.OCTLM_STUDY;
  const last = study ? ["study", "Your study"] : ["run", "Your model"];
  const nav = el("nav", { "aria-label": "sections" },
    ...[["onehot", "Lookup"], ["sum", "Token + position"], ["sinusoidal", "Sinusoidal"], ["rope", "RoPE"], ["alibi", "ALiBi"], ["t5", "T5"], ["fire", "FIRE"], ["xpos", "xPos"], ["kerple", "KERPLE"], ["gates", "FoX, stick-breaking"], ["firstlayer", "Bigram, value, Canon"], last].map(([id, text]) => el("a", { href: `#${id}` }, text)),
  );
  app.append(
    el("header", {},
      el("h1", {}, "Embeddings and positions"),
      el("p", { class: "lede" },
        "The first layer of a language model turns each token ID into a vector, and adds where in the sequence the token sits. ",
        "Play with each piece below; every formula here is checked against octlm's Python to 1e-5."),
      nav,
    ),
    el("main", {}, oneHotPlayground(), sumPlayground(), sinusoidalPlayground(), ropePlayground(), alibiPlayground(), t5Playground(), firePlayground(), xposPlayground(), kerplePlayground(), gatesPlayground(), firstLayerPlayground(), study ? studySection(study) : runSection(run)),
    el("footer", {}, "octlm · the page runs entirely in your browser; nothing is fetched from the network."),
  );
  document.body.dataset.ready = "true";
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
else main();
